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

_NUM_OR_NULL = {"type": ["number", "null"]}
_COLLECTIVE_BACKEND = _object({"name": _STR, "available": _BOOL, "device_types": _STRS, "detail": _STR})
_STAGE_STATUS = {"enum": [PASSED, FAILED, TIMED_OUT, "running"]}
_BANDWIDTH_ROW = _object({"bytes": _INT, "seconds": {"type": "number", "exclusiveMinimum": 0},
                          "algbw_gbps": _NUM, "busbw_gbps": _NUM})
_DIST_STAGE = _object({"name": {"enum": ["init", "barrier", "all_reduce", "bandwidth"]}, "status": _STAGE_STATUS,
                       "seconds": {"type": "number", "minimum": 0}, "detail": _STR,
                       "metrics": _object({}, world_size=_INT, device=_STR, latency_us=_NUM,
                                          dtypes={"type": "object", "additionalProperties": _BOOL},
                                          sizes={"type": "array", "items": _BANDWIDTH_ROW})})
_DIST_TYPE = _object({
    "type": _STR, "status": {"enum": [PASSED, FAILED, SKIPPED, TIMED_OUT]}, "detail": _STR,
    "seconds": {"type": "number", "minimum": 0}, "communicator": _STR_OR_NULL,
    "fallback_counts": {"type": "object", "additionalProperties": _INT},
    "stages": {"type": "array", "items": _DIST_STAGE},
})
_DISTRIBUTED = {"oneOf": [{"type": "null"}, _object({
    "world_size": {"type": "integer", "minimum": 2}, "timeout": _NUM,
    "types": {"type": "object", "additionalProperties": _DIST_TYPE}, "seconds": {"type": "number", "minimum": 0},
})]}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "anydevice check report",
    **_object({
        "schema_version": {"const": SCHEMA_VERSION},
        "options": _object({"devices": {"type": ["array", "null"], "items": _STR}, "quick": _BOOL,
                            "timeout": {"type": "number", "exclusiveMinimum": 0}, "no_fallback": _BOOL,
                            "in_process": _BOOL}, distributed={"type": ["integer", "null"]}),
        "environment": _object({"python": _STR, "numpy": _STR, "anydevice": _STR, "plugin_api_version": _INT,
                                "supported_plugin_api_versions": {"type": "array", "items": _INT},
                                "env": {"type": "object", "additionalProperties": _STR}}, dispatch_hit=_STR),
        "plugins": {"type": "array", "items": _PLUGIN},
        "devices": {"type": "object", "additionalProperties": _DEVICE_TYPE},
        "verdict": _STR,
        "exit_code": {"enum": [0, 1]},
        "seconds": {"type": "number", "minimum": 0},
    }, collectives={"type": "array", "items": _COLLECTIVE_BACKEND}, distributed=_DISTRIBUTED),
}
