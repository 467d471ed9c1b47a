"""Values and rules: the types that cross a boundary, the states the record keeps, errors,
units, bounds of numbers, hashing, spaces, constraints, budgets and spend, Pareto ranks. No
run state, no record, no plugins.
"""
