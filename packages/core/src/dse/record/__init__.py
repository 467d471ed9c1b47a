"""What survives the controller: the record of campaigns, runs, trials and attempts (SQLite),
its rows, the campaign locks, who holds a busy record, and ``dse doctor``'s salvage.
"""
