"""Flash wear and embodied carbon per device and tenant (sustainability/)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SustainabilityAssumptions(BaseModel):
    rated_dwpd: float = Field(description="Rated device writes per day (LACHESIS_FLASH_RATED_DWPD).")
    rated_years: float = Field(description="Years the rating holds for (LACHESIS_FLASH_RATED_YEARS).")
    pe_cycles: float = Field(
        description="Full-device media writes the flash endures: rated DWPD x 365.25 x rated years."
    )
    service_years: float = Field(
        description="Years a device serves before it is replaced anyway (LACHESIS_FLASH_SERVICE_YEARS)."
    )
    kgco2e_per_gb: float = Field(description="Embodied kgCO2e per GB of flash (LACHESIS_FLASH_KGCO2E_PER_GB).")
    window_s: float = Field(description="The window the rates are measured over (at most what telemetry keeps).")


class DeviceTenantShare(BaseModel):
    tenant: str
    share: float = Field(description="The tenant's share of the device's media bytes in the window.")
    kg_per_year: float


class DeviceSustainability(BaseModel):
    host: str
    name: str
    capacity_bytes: int
    placement_handles: int
    measured: bool = Field(
        description="False until the device has reported twice within the window; the figures are then null."
    )
    seconds: float | None = Field(description="The span of the reports in the window.")
    host_bytes_per_s: float | None
    media_bytes_per_s: float | None = Field(description="Null when the device does not measure media writes.")
    dlwa: float | None = Field(description="Media over host bytes in the window.")
    dwpd: float | None = Field(description="Host bytes written per day over the capacity.")
    lifetime_years: float | None = Field(
        description="Years until the P/E cycles are used up at the window's media rate (host rate when media is not measured); null when nothing is written."
    )
    embodied_kg: float = Field(description="The device's embodied kgCO2e: capacity in GB x kgCO2e per GB.")
    kg_per_year: float | None = Field(description="Embodied kgCO2e amortised over min(lifetime, service life).")
    tenants: list[DeviceTenantShare]
    unattributed_share: float | None = Field(description="Share of media bytes no tenant's stage wrote.")
    separate_handles_dlwa: float | None = Field(
        description="Modelled DLWA with the cache streams on their own handles (closed form)."
    )
    one_handle_dlwa: float | None = Field(
        description="Modelled DLWA with every cache stream on one handle (closed form)."
    )


class TenantDeviceShare(BaseModel):
    host: str
    name: str
    share: float
    kg_per_year: float


class TenantSustainability(BaseModel):
    name: str
    engines: list[str] = Field(description="Engines of the tenant's flash cache stages, as reported.")
    given_bytes: int = Field(
        description="Bytes the tenant's flash cache stages were asked to hold in the window (written through, and read misses filled)."
    )
    host_bytes: float = Field(description="Bytes its stages wrote to devices (placement handles) in the window.")
    media_bytes: float | None
    alwa: float | None = Field(description="Host bytes over given bytes.")
    dlwa: float | None = Field(description="Media bytes over host bytes.")
    wa: float | None = Field(description="ALWA x DLWA: media bytes over given bytes.")
    dwpd: float = Field(description="Device writes per day the tenant causes, summed over its devices.")
    lifetime_years: float | None = Field(description="The shortest projected lifetime among the devices it writes to.")
    kg_per_year: float = Field(description="Its share of its devices' embodied kgCO2e per year.")
    devices: list[TenantDeviceShare]


class SustainabilityScenario(BaseModel):
    name: str = Field(description="current, the other engine (kangaroo or fairywren), separate handles, one handle.")
    source: str = Field(description="measured, or how it is modelled.")
    engine: str | None
    wa: float | None = Field(description="The tenant's media bytes over its given bytes.")
    dlwa: float | None = Field(description="The tenant's media over host bytes.")
    lifetime_years: float | None = Field(description="The shortest lifetime among the tenant's devices.")
    kg_per_year: float


class SustainabilityDevices(BaseModel):
    assumptions: SustainabilityAssumptions
    devices: list[DeviceSustainability]


class SustainabilityTenants(BaseModel):
    assumptions: SustainabilityAssumptions
    tenants: list[TenantSustainability]


class SustainabilityComparison(BaseModel):
    assumptions: SustainabilityAssumptions
    tenant: str
    scenarios: list[SustainabilityScenario]
