"""The doctor's report, for people (format_report) and for scripts (to_json)."""

from __future__ import annotations

import dataclasses
import json

from tfrl.hardware.doctor.checks import healthy
from tfrl.hardware.doctor.facts import Facts, Finding

# --- reporting ------------------------------------------------------------------------------------


def to_json(facts: Facts, findings: list[Finding]) -> str:
    """{"healthy": bool, "findings": [...], "facts": {...}}: keys are Facts' and Finding's field names."""
    return json.dumps({"healthy": healthy(findings), "findings": [dataclasses.asdict(f) for f in findings],
                       "facts": dataclasses.asdict(facts)}, indent=2, sort_keys=True)


def format_report(facts: Facts, findings: list[Finding]) -> str:
    lines = ["tfrl doctor",
             f"  Python {facts.python_version}; CPU: {facts.cpu_model or '?'} ({facts.cpu_vendor or '?'})",
             "  installed: " + (", ".join(f"{n} {v}" for n, v in facts.distributions.items()) or "nothing relevant")]
    if facts.tensorflow_error is None:
        lines += [
            f"  TensorFlow {facts.tf_version}, Keras {facts.keras_version}, "
            f"KERAS_BACKEND={facts.environment.get('KERAS_BACKEND') or 'tensorflow (default)'}",
            f"  build: {facts.build_flavour} ({', '.join(f'{k}={v}' for k, v in facts.build_info.items())})",
            f"  physical devices: {', '.join(facts.physical_devices)}",
            f"  logical devices: {', '.join(facts.logical_devices)}",
            f"  pluggable devices: {', '.join(facts.pluggable_devices) or 'none'}",
        ]
    else:
        lines.append(f"  TensorFlow: import failed ({facts.tensorflow_error})")
    if facts.zentf is not None:
        lines.append(f"  zentf: {facts.zentf.distribution} {facts.zentf.version}, built for TF "
                     f"{facts.zentf.built_for_tf or '?'}, plugin {facts.zentf.plugin_library or 'MISSING'}")
    if facts.xla_compiles is not None:
        lines.append("  XLA: compiles and runs a small function" if facts.xla_compiles
                     else f"  XLA: FAILED ({facts.xla_error})")
    for timing in facts.matmul:
        relative = "" if timing.relative_error is None else f" (relative {timing.relative_error:.2g})"
        lines.append(
            f"  matmul {timing.size}x{timing.size} float32 on {timing.device}: "
            + (f"FAILED ({timing.error})" if timing.error else
               f"{timing.median_ms:.3f} ms ({timing.gflops:.1f} GFLOP/s), max |error| vs NumPy "
               f"{timing.max_abs_error:.2g}{relative}"))
    if facts.tf32_enabled is not None and any(":GPU:" in name for name in facts.physical_devices):
        lines.append(f"  TF32 (float32 matmuls on GPUs from Ampere on): {'on' if facts.tf32_enabled else 'off'}")
    if facts.build_info.get("is_cuda_build") == "True":
        lines.append("  ptxas: " + (f"{facts.ptxas.version or 'version unknown'} ({facts.ptxas.path})"
                                    if facts.ptxas else "not found"))
    tools = ", ".join(f"{tool}={path or 'absent'}" for tool, path in facts.gpu_tools.items())
    lines.append(f"  GPU tools: {tools}; /dev/kfd: {facts.kfd}")
    lines.append("  environment:")
    lines += [f"    {name}={value}" for name, value in facts.environment.items() if value is not None]
    unset = [name for name, value in facts.environment.items() if value is None]
    if unset:
        lines.append(f"    unset: {' '.join(unset)}")
    problems = sum(f.severity == "problem" for f in findings)
    notes = len(findings) - problems
    verdict = "healthy" if healthy(findings) else "PROBLEMS FOUND"
    lines.append(f"verdict: {verdict} ({problems} problem{'s' * (problems != 1)}, {notes} note{'s' * (notes != 1)})")
    for finding in findings:
        lines += [f"  {finding.severity} [{finding.check}]: {finding.message}", f"    fix: {finding.fix}"]
    return "\n".join(lines)
