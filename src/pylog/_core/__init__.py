"""pylog's compiled core (Cython + C). Import the public modules instead."""
