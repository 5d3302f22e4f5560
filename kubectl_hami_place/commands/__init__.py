"""The plugin's commands: one module per verb, click only. Each turns its flags into its options
dataclass (ops/args.py) and hands it to ops/, imported when the command runs, so `--help` and the
completion of its flags load click alone. No command module imports another (.importlinter), and
cli.py's COMMANDS names each one (tests/unit/test_cli_layout.py)."""
