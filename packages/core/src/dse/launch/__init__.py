"""Starting a run: plugins resolved into an engine, signals while it runs, the live console.
"""
