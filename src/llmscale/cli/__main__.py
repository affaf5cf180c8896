"""``python -m llmscale.cli``: the ``llmscale`` command line."""

from llmscale.cli.app import main

if __name__ == "__main__":
    main()
