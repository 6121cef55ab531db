"""`python -m sandboxes build | gc | try ...`."""

from sandboxes.cli import main

if __name__ == "__main__":
    main()
