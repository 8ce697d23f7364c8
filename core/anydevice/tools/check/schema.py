"""JSON Schema (draft 2020-12) of the ``anydevice check --json`` document; docs/CHECK.md explains each field."""
from __future__ import annotations

from anydevice.tools.check.checks import CHECKS, FAILED, PASSED, SKIPPED, TIMED_OUT, UNAVAILABLE

SCHEMA_VERSION = 2

_STR, _INT, _NUM, _OBJ, _BOOL = ({"type": t} for t in ("string", "integer", "number", "object", "boolean"))
_STR_OR_NULL = {"type": ["string", "null"]}
_STRS = {"type": "array", "items": _STR}


def _object(required: dict, **optional) -> dict:
    return {"type": "object", "required": list(required), "properties": {**required, **optional}}


_OUTCOME = _object({"device": _STR, "status": {"enum": [PASSED, FAILED, SKIPPED]}, "detail": _STR, "hint": _STR})
_CHECK = _object({
    "name": {"enum": [c[0] for c in CHECKS]}, "status": {"enum": [PASSED, FAILED, SKIPPED, TIMED_OUT]},
    "seconds": {"type": "number", "minimum": 0}, "detail": _STR, "hint": _STR, "metrics": _OBJ,
    "devices": {"type": "array", "items": _OUTCOME}, "failed_on": _STRS,
})
_UNUSABLE = _object({"device": _STR, "physical_index": {"type": "integer", "minimum": 0}, "reason": _STR,
                     "hint": _STR, "kept_visible": _BOOL})
_DEVICE_TYPE = _object({
    "type": _STR, "requested": _BOOL, "status": {"enum": [PASSED, FAILED, UNAVAILABLE, TIMED_OUT]},
    "reason": _STR, "hint": _STR, "plugin": _STR_OR_NULL, "plugin_version": _STR_OR_NULL, "description": _STR,
    "count": {"type": "integer", "minimum": 0}, "devices": _STRS, "unusable": {"type": "array", "items": _UNUSABLE},
    "checks": {"type": "array", "items": _CHECK}, "fallback_ops": _STRS, "stage": _STR_OR_NULL, "verdict": _STR,
    "environment": _OBJ, "plugin_output": _STR,
})
_PLUGIN = _object({
    "name": _STR, "module": _STR_OR_NULL, "distribution": _STR_OR_NULL, "version": _STR_OR_NULL,
    "device_types": _STRS,
    "status": {"enum": ["discovered", "loaded", "skipped", "failed", "conflict", "disabled", TIMED_OUT]},
    "reason": _STR, "api_version": {}, "hint": _STR,
    "environment": {"type": "object", "additionalProperties": _OBJ}, "hook_errors": _STRS, "plugin_output": _STR,
})

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "anydevice check report",
    **_object({
        "schema_version": {"const": SCHEMA_VERSION},
        "options": _object({"devices": {"type": ["array", "null"], "items": _STR}, "quick": _BOOL,
                            "timeout": {"type": "number", "exclusiveMinimum": 0}, "no_fallback": _BOOL,
                            "in_process": _BOOL}),
        "environment": _object({"python": _STR, "numpy": _STR, "anydevice": _STR, "plugin_api_version": _INT,
                                "supported_plugin_api_versions": {"type": "array", "items": _INT},
                                "env": {"type": "object", "additionalProperties": _STR}}),
        "plugins": {"type": "array", "items": _PLUGIN},
        "devices": {"type": "object", "additionalProperties": _DEVICE_TYPE},
        "verdict": _STR,
        "exit_code": {"enum": [0, 1]},
        "seconds": {"type": "number", "minimum": 0},
    }),
}
