"""From a policy document to rules and stages: parse YAML with bounds (`parse.py`), the
document model (`model.py`, its JSON schema in `json_schema.py`), compile to rules
(`compile.py`), the rule algebra (`match.py`: matches, covers, overlaps), static checks
(`verify.py`), the rules in force (`ruleset.py`) and applying a document (`service.py`).
Start at `service.py`."""
