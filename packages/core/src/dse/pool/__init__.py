"""The loop: passes over one campaign or several sharing resources (``Pool``, ``drive``), and
the pure planning of fair share and reservations (``PoolScheduler``).
"""
