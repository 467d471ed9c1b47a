"""Integrations: where a campaign's trials are also written as they end (``[integrations]``):
MLflow, TensorBoard and Weights & Biases, and any plugin's (:class:`dse.Integration`). The
writing itself is :mod:`dse.integrations._exporter`'s; each module here imports its library
only when a campaign names it."""
