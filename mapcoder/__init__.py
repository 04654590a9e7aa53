"""The roles MapCoder's chain adds to Planner -> Coder (docs/roles.md): registered in roles.ROLES like
the two core roles, skipped on a first reading.

    mapcoder/retriever.py    the Retrieval role: recalled similar problems (MapCoder-style), or BM25 over training statements
    mapcoder/debugger.py     the Debugging role: a failing program and its visible-test feedback -> a repaired program
"""
