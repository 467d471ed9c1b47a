"""Reading the record for people: ``dse status``, ``report``, ``show`` and ``export`` as text,
JSON and HTML with figures, and ``dse.load``'s results. Reads the record; never imports the
engine.
"""
