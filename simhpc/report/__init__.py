"""Reports: summary files, metrics tables and figures."""
