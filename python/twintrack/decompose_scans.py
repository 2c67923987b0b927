"""(being written)"""


def decompositions(table: dict) -> dict:
    """Entries to add to the frontend's decomposition table (`table`: the table so far)."""
    return {}
