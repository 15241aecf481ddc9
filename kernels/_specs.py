"""The declarations of hoptune's elementwise kernels.

Each operation is a call into the kernel's ``.cuh`` math. The multi-tensor
kernels (AdamW, SGD, scale) take tables of data pointers, one row per tensor
role, plus each tensor's start and size and the chunk table (see
multi_tensor.cuh), so one launch updates every tensor of one dtype and device
in place.
"""

from __future__ import annotations

import dataclasses

from hoptune.kernels._source import KernelSpec, Param
from hoptune.kernels.reference import AdamWScalars, SGDScalars

__all__ = [
    "ADAMW",
    "ADAMW_COHORT",
    "ADAMW_FIELDS",
    "ADAMW_ROWS",
    "ALL",
    "SCALE",
    "SCALED_SIGMOID",
    "SCALED_SIGMOID_GRAD",
    "SGD",
    "SGD_COHORT",
    "SGD_FIELDS",
]


def _raw(name: str, type_: str = "int64") -> Param:
    return Param(name, type_, "raw")


def _scalar(name: str, type_: str = "real") -> Param:
    return Param(name, type_, "scalar")


def _each_element(body: str) -> str:
    """A multi-tensor operation: body runs with t (the tensor) and k (the element in it),
    for every index that is not padding."""
    return ("long long k;\n"
            "const long long t = ht_chunk_tensor(&chunks[0], chunk_shift, &starts[0], i, &k);\n"
            f"if (k < sizes[t]) {{\n{body.strip()};\n}}")


def _table() -> tuple[Param, ...]:
    """The parameters that place each tensor of a multi-tensor launch (_multi_tensor.py)."""
    return (_raw("starts"), _raw("sizes"), _raw("chunks"), _scalar("chunk_shift", "int32"))


def _each_vector(roles: dict[str, str], body: str) -> str:
    """A multi-tensor operation over vectors of ``vector`` elements: index i is the u-th
    vector of tensor t. ``vector`` is 1, or HT_VEC where every tensor of the launch starts
    16-byte aligned (kernels._multi_tensor). A whole vector is loaded role by role, each
    load one 128-bit access, ``body`` runs once per element (lane j) with ``p_<role>``
    pointing at its copy of the element (0 for a role whose tensor's pointer is 0), and
    what the body may write is stored back the same way. The elements of a tensor's last,
    partial vector, and those of a launch of ``vector`` 1, run ``body`` one by one with
    ``p_<role>`` pointing into the tensor. ``roles`` maps each role to "in" (read only) or
    "inout" (read and written). The arithmetic is the body's either way, element by
    element: the two paths are bitwise the same."""
    loads, stores, lanes, direct = [], [], [], []
    for role, how in roles.items():
        at = f"((HT_REAL *){role}[t] + k0)"
        loads.append(f"HT_FN(ht_vec) v_{role};\n"
                     f"if ({role}[t] != 0) v_{role} = *(const HT_FN(ht_vec) *){at};")
        if how == "inout":
            stores.append(f"if ({role}[t] != 0) *(HT_FN(ht_vec) *){at} = v_{role};")
        lanes.append(f"HT_REAL *p_{role} = {role}[t] != 0 ? &v_{role}.v[j] : (HT_REAL *)0;")
        direct.append(f"HT_REAL *p_{role} = {role}[t] != 0 ? (HT_REAL *){role}[t] + k "
                      f": (HT_REAL *)0;")
    nl = "\n"
    return f"""long long u;
const long long t = ht_chunk_tensor(&chunks[0], chunk_shift, &starts[0], i, &u);
const long long n = sizes[t];
const long long k0 = u * vector;
if (vector == HT_VEC && k0 + HT_VEC <= n) {{
{nl.join(loads)}
for (int j = 0; j < HT_VEC; ++j) {{
{nl.join(lanes)}
{body.strip()};
}}
{nl.join(stores)}
}} else {{
for (long long k = k0; k < k0 + vector && k < n; ++k) {{
{nl.join(direct)}
{body.strip()};
}}
}}"""


#: An AdamW launch's tensors: a pointer row per role, the table placing them, the vector.
_ADAMW_TENSORS = (
    _raw("params"),
    _raw("grads"),
    _raw("exp_avgs"),
    _raw("exp_avg_sqs"),
    _raw("max_exp_avg_sqs"),
    *_table(),
    _scalar("vector", "int32"),
)

ADAMW = KernelSpec(
    name="ht_adamw",
    headers=("multi_tensor.cuh", "adamw.cuh"),
    inputs=(
        *_ADAMW_TENSORS,
        _scalar("decay"),
        _scalar("one_minus_beta1"),
        _scalar("beta2"),
        _scalar("one_minus_beta2"),
        _scalar("neg_step_size"),
        _scalar("bias_correction2_sqrt"),
        _scalar("eps"),
        _scalar("amsgrad", "int32"),
        _scalar("maximize", "int32"),
    ),
    outputs=(),
    # max_exp_avg_sqs' pointers are 0 without amsgrad (the table's rows say so)
    operation=_each_vector(
        {"params": "inout", "grads": "in", "exp_avgs": "inout", "exp_avg_sqs": "inout",
         "max_exp_avg_sqs": "inout"}, """
HT_FN(ht_adamw_step)(p_params, *p_grads, p_exp_avgs, p_exp_avg_sqs,
    amsgrad ? p_max_exp_avg_sqs : (HT_REAL *)0,
    decay, one_minus_beta1, beta2, one_minus_beta2, neg_step_size,
    bias_correction2_sqrt, eps, amsgrad, maximize)
"""),
)

#: AdamWScalars' fields, in the order of a row of ADAMW_ROWS' ``rows`` (``ht_adamw`` takes
#: them as scalar parameters of the same names).
ADAMW_FIELDS = tuple(f.name for f in dataclasses.fields(AdamWScalars))
#: SGDScalars' fields, in the order of a cohort's table (its first_step after them).
SGD_FIELDS = tuple(f.name for f in dataclasses.fields(SGDScalars))


def _row_scalars(fields: tuple[str, ...]) -> str:
    """The scalars of one step, read from row ``row[0]`` of the ``rows`` table."""
    return f"const long long at = row[0] * {len(fields)};\n" + "".join(
        f"const HT_REAL {name} = rows[at + {j}];\n" for j, name in enumerate(fields))


# ADAMW with its step's scalars read from device memory: ``rows`` holds one row of
# ADAMW_FIELDS per step prepared (``kernels.DeviceSteps``) and ``row[0]`` says which this step
# takes, so a launch needs nothing from the host that changes from step to step and can be
# recorded once in a CUDA graph and replayed. The arithmetic is ht_adamw's, on the same
# numbers: a step is bitwise the host-scalar launch of the same step.
ADAMW_ROWS = KernelSpec(
    name="ht_adamw_rows",
    headers=("multi_tensor.cuh", "adamw.cuh"),
    inputs=(
        *_ADAMW_TENSORS,
        _raw("rows", "real"),
        _raw("row"),
        _scalar("amsgrad", "int32"),
        _scalar("maximize", "int32"),
    ),
    outputs=(),
    operation=_row_scalars(ADAMW_FIELDS) + ADAMW.operation,
)

SGD = KernelSpec(
    name="ht_sgd",
    headers=("multi_tensor.cuh", "sgd.cuh"),
    inputs=(
        _raw("params"),
        _raw("grads"),
        _raw("momentum_buffers"),
        *_table(),
        _scalar("vector", "int32"),
        _scalar("neg_lr"),
        _scalar("weight_decay"),
        _scalar("momentum"),
        _scalar("one_minus_dampening"),
        _scalar("nesterov", "int32"),
        _scalar("first_step", "int32"),
        _scalar("maximize", "int32"),
    ),
    outputs=(),
    # momentum_buffers' pointers are 0 without momentum
    operation=_each_vector(
        {"params": "inout", "grads": "in", "momentum_buffers": "inout"}, """
HT_FN(ht_sgd_step)(p_params, *p_grads, momentum != 0 ? p_momentum_buffers : (HT_REAL *)0,
    neg_lr, weight_decay, momentum, one_minus_dampening, nesterov, first_step, maximize)
"""),
)

# A cohort kernel updates the stacked tensors of several trials (axis 0 the trial) in one
# launch. per_trial[t] is the number of elements of one trial in tensor t, so element k of
# tensor t belongs to trial r = k / per_trial[t]; scalars holds (fields, n_trials) tables of
# each trial's host scalars (AdamWScalars / SGDScalars, then SGD's first_step as 0 or 1),
# one per step prepared, and the launch reads table row[0] (0 for a step launched alone;
# ``kernels.DeviceSteps`` advances it from step to step, so a graph can hold the launch).
def _trial(fields: int) -> str:
    return f"""
const long long r = k / per_trial[t];
const HT_REAL *s = &scalars[row[0] * {fields} * n_trials];
"""


def _cohort_inputs(roles: tuple[str, ...]) -> tuple[Param, ...]:
    return (*(_raw(role) for role in roles), *_table(),
            _raw("per_trial"), _raw("scalars", "real"), _raw("row"),
            _scalar("n_trials", "int64"))


ADAMW_COHORT = KernelSpec(
    name="ht_adamw_cohort",
    headers=("multi_tensor.cuh", "adamw.cuh"),
    inputs=(
        *_cohort_inputs(("params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs")),
        _scalar("amsgrad", "int32"),
        _scalar("maximize", "int32"),
    ),
    outputs=(),
    operation=_each_element(_trial(len(ADAMW_FIELDS)) + """
HT_FN(ht_adamw_step)((HT_REAL *)params[t] + k, ((const HT_REAL *)grads[t])[k],
    (HT_REAL *)exp_avgs[t] + k, (HT_REAL *)exp_avg_sqs[t] + k,
    amsgrad ? (HT_REAL *)max_exp_avg_sqs[t] + k : (HT_REAL *)0,
    s[r], s[n_trials + r], s[2 * n_trials + r], s[3 * n_trials + r], s[4 * n_trials + r],
    s[5 * n_trials + r], s[6 * n_trials + r], amsgrad, maximize)
"""),
)

SGD_COHORT = KernelSpec(
    name="ht_sgd_cohort",
    headers=("multi_tensor.cuh", "sgd.cuh"),
    inputs=(
        *_cohort_inputs(("params", "grads", "momentum_buffers")),
        _scalar("nesterov", "int32"),
        _scalar("maximize", "int32"),
    ),
    outputs=(),
    operation=_each_element(_trial(len(SGD_FIELDS) + 1) + """
const HT_REAL momentum = s[2 * n_trials + r];
HT_FN(ht_sgd_step)((HT_REAL *)params[t] + k, ((const HT_REAL *)grads[t])[k],
    momentum != 0 ? (HT_REAL *)momentum_buffers[t] + k : (HT_REAL *)0,
    s[r], s[n_trials + r], momentum, s[3 * n_trials + r], nesterov,
    s[4 * n_trials + r] != 0, maximize)
"""),
)

SCALE = KernelSpec(
    name="ht_scale",
    headers=("multi_tensor.cuh", "scale.cuh"),
    inputs=(_raw("values"), *_table(), _raw("coef", "real")),
    outputs=(),
    operation=_each_element("HT_FN(ht_scale)((HT_REAL *)values[t] + k, coef[0])"),
)

SCALED_SIGMOID = KernelSpec(
    name="ht_scaled_sigmoid",
    headers=("scaled_sigmoid.cuh",),
    inputs=(Param("x", "real", "array"), _scalar("scale")),
    outputs=(Param("y", "real", "array"),),
    operation="y = HT_FN(ht_scaled_sigmoid)(x, scale)",
)

SCALED_SIGMOID_GRAD = KernelSpec(
    name="ht_scaled_sigmoid_grad",
    headers=("scaled_sigmoid.cuh",),
    inputs=(Param("x", "real", "array"), Param("grad_out", "real", "array"), _scalar("scale")),
    outputs=(Param("grad_x", "real", "array"),),
    operation="grad_x = HT_FN(ht_scaled_sigmoid_grad)(x, grad_out, scale)",
)

ALL: tuple[KernelSpec, ...] = (
    ADAMW, SGD, SCALE, SCALED_SIGMOID, SCALED_SIGMOID_GRAD, ADAMW_COHORT, SGD_COHORT,
    ADAMW_ROWS,
)
