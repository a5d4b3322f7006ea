"""Developer tools that ship nowhere: generators of checked-in files (the configuration reference)."""
