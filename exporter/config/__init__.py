"""The YAML configuration: the schema engine (engine), value parsers (values), the safe YAML loader
(yaml_safe) and the file's top-level keys (file). Each feature's section lives beside the feature."""
