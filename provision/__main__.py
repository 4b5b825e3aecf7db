"""`python -m provision` is the same as the `provision` console script."""

from provision.cli.app import main

if __name__ == "__main__":
    main()
