"""Renderings of a GradeResult: terminal text, Gradescope JSON, Markdown, HTML."""
