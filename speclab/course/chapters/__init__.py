"""Helpers of single chapters of the book: drawing, reading records and setup that a page calls in one line."""
