"""Runnable examples; tests/test_examples.py runs each of them in CI."""
