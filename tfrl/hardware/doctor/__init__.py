"""The doctor (`tfrl doctor`): gathers facts about this machine's TensorFlow install, then judges them.

    facts = gather_facts(logical_cpus=1)        # imports TF, times a matmul per device, compiles with XLA
    findings = diagnose(facts)                  # pure: one small check function per known problem
    print(format_report(facts, findings))       # or to_json(facts, findings)

Gathering never raises for a broken install (a failed TensorFlow import is a fact
too), and it imports TensorFlow only inside gather_facts, so this module loads
where TF does not. Every check is a pure function of `Facts`, so each can be
tested with fabricated facts (a ROCm build with no GPU, two TF wheels, ...).

A finding is a "problem" (`tfrl doctor` exits 1) or a "note" (worth knowing,
not wrong: the process still exits 0). Each carries the fix.

    facts.py    what the doctor knows (Facts, Finding, ...) and how it finds out (gather_facts: the impure part)
    checks.py   one pure check per known problem, and diagnose()
    report.py   the report and its JSON
"""

from tfrl.hardware.doctor.checks import (  # noqa: F401 - the doctor's API
    _hides_every_gpu, check_tensorflow_imports, check_one_tensorflow_distribution, check_rocm_build_sees_gpu,
    check_cuda_build_sees_gpu, check_visible_devices_hide_gpus, check_keras_3_with_tf_2_16_or_newer,
    check_keras_backend_is_tensorflow, check_zentf_matches_tf, check_zentf_enabled, check_zentf_on_amd_cpu,
    check_cnn_precision_on_cpu, check_requirements_met, check_xla_compiles, check_matmul_runs_on_every_device,
    check_tf32_on_gpus, check_ptxas, diagnose, healthy)
from tfrl.hardware.doctor.facts import (  # noqa: F401
    _relevant_environment, ENVIRONMENT_PREFIXES, ENVIRONMENT_VARIABLES, Facts, Finding, MATMUL_REPEATS,
    MATMUL_SIZE, MatmulTiming, Ptxas, STACK_DISTRIBUTIONS, TF_COMPANIONS, TF_DISTRIBUTIONS, UnmetRequirement,
    ZENTF_DISTRIBUTIONS, ZentfFacts, find_ptxas, gather_facts, installed_distributions, product_tolerance,
    unsatisfied_requirements)
from tfrl.hardware.doctor.report import format_report, to_json  # noqa: F401
