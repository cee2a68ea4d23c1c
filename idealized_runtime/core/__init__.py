"""The foundation every package stands on: domain types, errors, files and the shipped catalog.

Nothing here imports another first-party package; everything else may import it.
"""
