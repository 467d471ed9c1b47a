"""The ``dse`` command: its parser and one handler per subcommand.
"""
