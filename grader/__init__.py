"""Autograder for the PagedAttention exercise."""

__version__ = "0.1.0"
