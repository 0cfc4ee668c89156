"""The finding model and what is reported: validation, the pipeline, suppressions."""
