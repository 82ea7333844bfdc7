"""Integrations with web frameworks: `sqljobs.contrib.django` (the `django` extra)."""
