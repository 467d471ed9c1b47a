"""What plugins and trials meet: the protocols (agent, runner, environment, stopping rule,
scorer), the ``Backend`` base class, the plugin manager, the agent guard, and dse-core's own
built-in plugins (command environment, scorers, stopping rules).
"""
