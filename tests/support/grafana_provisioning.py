"""The documented format of Grafana's provisioning files (apiVersion 1), as JSON schemas.

The keys and their types are those Grafana reads (Grafana's pkg/services/provisioning/datasources/
types.go ``upsertDataSourceFromConfigV1`` and ``deleteDatasourceConfigV1``, and
pkg/services/provisioning/dashboards/types.go ``configs``, as documented on its "Provision Grafana"
page). Grafana's YAML reader ignores a key it does not know, so a misspelt key would be dropped
without a word: these schemas refuse unknown keys. Grafana also refuses two default data sources in
one organisation and two dashboard providers of one name; ``problems`` checks both.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import jsonschema

_TEXT = {"type": "string"}
_FLAG = {"type": "boolean"}
_ID = {"type": "integer", "minimum": 1}

DATASOURCES = {
    "type": "object",
    "required": ["apiVersion"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": 1},
        "datasources": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "type"],
                "additionalProperties": False,
                "properties": {
                    "orgId": _ID,
                    "orgName": _TEXT,
                    "version": {"type": "integer"},
                    "name": {"type": "string", "minLength": 1},
                    "type": {"type": "string", "minLength": 1},
                    "access": {"enum": ["proxy", "direct"]},
                    "url": _TEXT,
                    "user": _TEXT,
                    "database": _TEXT,
                    "basicAuth": _FLAG,
                    "basicAuthUser": _TEXT,
                    "withCredentials": _FLAG,
                    "isDefault": _FLAG,
                    "correlations": {"type": "array", "items": {"type": "object"}},
                    "jsonData": {"type": "object"},
                    "secureJsonData": {"type": "object", "additionalProperties": _TEXT},
                    "editable": _FLAG,
                    "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
                },
            },
        },
        "deleteDatasources": {
            "type": "array",
            "items": {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {"orgId": _ID, "orgName": _TEXT, "name": _TEXT}},
        },
    },
}

DASHBOARD_PROVIDERS = {
    "type": "object",
    "required": ["apiVersion", "providers"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": 1},
        "providers": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "type", "options"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "type": {"const": "file"},
                    "orgId": _ID,
                    "folder": _TEXT,
                    "folderUid": _TEXT,
                    "editable": _FLAG,
                    "disableDeletion": _FLAG,
                    "updateIntervalSeconds": {"type": "integer", "minimum": 0},
                    "allowUiUpdates": _FLAG,
                    "options": {
                        "type": "object",
                        "required": ["path"],
                        "additionalProperties": False,
                        "properties": {"path": {"type": "string", "pattern": "^/"}, "foldersFromFilesStructure": _FLAG},
                    },
                },
            },
        },
    },
}


def problems(document: Any, schema: dict[str, Any]) -> list[str]:
    """What is wrong with one provisioning file, each with where: [] when nothing."""
    found = [f"{'.'.join(str(part) for part in error.absolute_path) or '(top)'}: {error.message}" for error in jsonschema.Draft7Validator(schema).iter_errors(document)]
    if found:
        return found
    if schema is DATASOURCES:
        defaults = Counter(source.get("orgId", 1) for source in document.get("datasources", []) if source.get("isDefault"))
        found += [f"datasources: {count} default data sources in organisation {org}" for org, count in defaults.items() if count > 1]
    else:
        names = Counter(provider["name"] for provider in document["providers"])
        found += [f"providers: the name {name!r} is used {count} times" for name, count in names.items() if count > 1]
    return found
