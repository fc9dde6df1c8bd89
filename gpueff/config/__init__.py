"""The YAML configuration's engine: the schema engine (engine), value parsers (values) and the safe
YAML loader (yaml_safe). It knows no feature: each feature's section lives beside the feature, and the
file's top-level keys in gpueff/settings.py."""
