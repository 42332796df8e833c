"""Tenants: what classifies IO to them."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field, field_validator

from lachesis_controller.bus.messages import Classifier, Name
from lachesis_controller.schemas.base import RequestModel, at_field
from lachesis_controller.validation.bounds import MAX_CLASSIFIERS, check_classifier_value


class TenantSpec(RequestModel):
    name: Name
    classifiers: list[Classifier] = Field(
        max_length=MAX_CLASSIFIERS,
        description="How the agents recognise this tenant's IO; any classifier matching is enough. "
        "A path_prefix is an absolute, normal path (in the FUSE mounts' namespace), a uid a decimal number, "
        "a cgroup the cgroup v2 path /proc/PID/cgroup shows, relative to the cgroup2 root (/analytics, not a host "
        "path under /sys/fs/cgroup); no value holds control characters. A classifier that a data path "
        "a registered host runs cannot decide is refused (422 not-enforced).",
    )
    description: str | None = Field(default=None, max_length=1024)

    @field_validator("classifiers")
    @classmethod
    def _meaningful(cls, classifiers: list[Classifier]) -> list[Classifier]:
        for index, classifier in enumerate(classifiers):
            at_field(f"classifiers[{index}].value", check_classifier_value, classifier.kind, classifier.value)
        return classifiers


class TenantOut(BaseModel):
    name: str
    classifiers: list[Classifier]
    description: str | None
    created_at: datetime
    updated_at: datetime


class TenantChange(TenantOut):
    rollout_id: str = Field(description="Rollout that ships this change to the hosts.")
