"""The Python API: ``dse.run`` and ``dse.load``.
"""
