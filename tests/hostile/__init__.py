"""Hostile input: what each part of the project refuses, and the tests that show it."""
