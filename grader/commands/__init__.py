"""One module per verb of `python -m grader`; each exposes register(subparsers)."""
