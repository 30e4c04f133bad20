"""`python -m launcher` is the same program as the `safe-sft` console script."""

from launcher.cli import main

if __name__ == "__main__":
    main()
