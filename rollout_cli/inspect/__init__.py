"""`inspect`: aggregations of dumps (through the same stage functions as convert) or of a
converted output (through its manifest), returned as plain data."""
