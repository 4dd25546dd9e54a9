"""Resolve ``mechanism: auto`` of a categorical field before its registration is looked up.

The choice (``privstream.mechanisms.selection``) uses the domain size and the
field's resolved (epsilon, delta) only. What a candidate cannot do narrows
the candidates:

* ``delta > 0``: randomized response only (local hashing, subset
  selection and unary encoding are pure epsilon-DP);
* a domain with integer values: no local hashing (it hashes strings);
  subset selection and unary encoding release the values themselves,
  integers included;
* a memoized field: no subset selection. ``auto``'s menu for memoized
  fields is the one it had before subset selection came, so that an
  unchanged config keeps its release id: a new id would make every device
  report its value a second time, with independent noise (the epsilons
  add). docs/mechanisms.md advises naming the mechanism of a memoized field.

Without a domain, ``auto`` is local hashing, the only mechanism for an open
domain. With a domain, local hashing enforces it exactly as randomized
response does: values outside it are dead-lettered, or mapped to
``unknown_as`` (``HashedHandler``). The resolved spec carries the chosen
mechanism, so the release id (its ``spec`` dump) names it.
"""

from __future__ import annotations

from privstream.config import FieldConfig, Guarantee
from privstream.config.fields import CategoricalField, IntegerField, RealField
from privstream.kinds.auto_real import resolve_auto_real
from privstream.kinds.base import AutoChoice
from privstream.mechanisms.selection import frequency_variances, least_variance

#: declared mechanisms compared with auto's choice (``explain`` warns past this ratio)
WARN_RATIO = 1.5


def auto_choice(spec: CategoricalField, share: Guarantee) -> AutoChoice:
    """The mechanism ``auto`` gives this field at its resolved share."""
    if spec.domain is None:
        return AutoChoice(mechanism="local_hashing", variances={}, restricted="no domain")
    variances = frequency_variances(len(spec.domain), share.epsilon, share.delta)
    restricted = None
    if share.delta > 0.0:
        restricted = "delta > 0: randomized_response only"
    else:
        if spec.memoize_by is not None or spec.memo_identity is not None:
            restricted = "memoized: no subset_selection (auto's memo menu is fixed)"
            variances.pop("subset_selection", None)
        if any(not isinstance(value, str) for value in spec.domain):
            restricted = "integer domain values: no local_hashing"
            variances.pop("local_hashing")
    return AutoChoice(
        mechanism=least_variance(variances), variances=variances, restricted=restricted
    )


def resolve_auto(spec: FieldConfig, share: Guarantee | None) -> FieldConfig:
    """The spec with ``mechanism: auto`` replaced by the chosen mechanism (others unchanged)."""
    if isinstance(spec, RealField | IntegerField) and spec.mechanism == "auto":
        return spec if share is None else resolve_auto_real(spec, share)
    if not isinstance(spec, CategoricalField) or spec.mechanism != "auto" or share is None:
        return spec
    chosen = auto_choice(spec, share).mechanism
    # no re-validation: a chosen local_hashing keeps the domain and unknown_as it enforces
    return spec.model_copy(update={"mechanism": chosen})
