"""The campaign as a user writes it: the campaign file read and checked, its data and code
versions, its dependencies, a Python function as a trial's command.
"""
