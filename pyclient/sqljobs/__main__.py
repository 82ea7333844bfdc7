"""`python -m sqljobs ...`: the command line, as the `sqljobs` script runs it."""

from sqljobs._cli import main

main()
