"""One campaign run: the parts that hold its state (live trials, budget gate, retries,
feedback to the agent, claims, trial directories...), the workers that move a trial between
them (dispatch, collect, results, resume), and ``Engine``, which composes them and offers
the per-pass API.
"""
