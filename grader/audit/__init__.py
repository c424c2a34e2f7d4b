"""Mutation audit of the grader: plant one small bug in the exercise's answer, grade it, repeat.

A good grader fails (kills) every such mutant whose behaviour differs from the contract's.
The pieces, each one module:

- ``regions``: where the answer lives in the exercise's single source, and which TODO owns it;
- ``operators``: the mutation operators, on the stdlib ``ast``;
- ``mutants``: every mutant of the source, with a stable id, as the reference module ``assign`` builds;
- ``equivalents``: the reviewed list of mutants that behave as the answer does;
- ``run``: grade the mutants in parallel, each in its own process;
- ``report``: kill rates per TODO, survivors with their diffs, the JSON report.

The audit needs the repository (``notebooks/source``): the installed grader holds no answer.
"""

TARGET = 0.95  # the kill rate every TODO must reach, over its non-equivalent, valid mutants
