"""`python -m caseshelf.cli`: the same as the `caseshelf` command."""

from caseshelf.cli import main

main()
