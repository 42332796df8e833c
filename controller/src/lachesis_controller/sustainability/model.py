"""Flash wear and embodied carbon from measured bytes: write amplification, device writes per
day, projected lifetime, and embodied kgCO2e per year, per device and attributed to tenants.

Pure arithmetic on byte counts over a window; `measure.py` gathers the counts from telemetry.
Sources of every constant and formula (docs/sustainability.md lists them again):

- DLWA = media bytes / host bytes written (FDP in CacheLib §2.1; FairyWREN §3.1); ALWA = bytes
  the cache writes to the device / bytes of objects it was given (Kangaroo §2.2; FairyWREN
  §3.3); write amplification WA = ALWA × DLWA (FairyWREN §3.3).
- Lifetime is inversely proportional to DLWA ("a DLWA of 2 causes the SSD to fail twice as
  fast", FDP in CacheLib §2.2). The media endures `rated DWPD × 365.25 × rated years` full
  device writes: the rating (e.g. FairyWREN §6.1's ZNS SSD, 3.5 DWPD for 5 years) taken as
  writes at DLWA 1, which is the assumption of FDP in CacheLib's Theorem 2 (a device written
  at its budget with DLWA 1 lasts its warranty L_dev).
- Theorem 2 (FDP in CacheLib §4.2.1): C_embodied = DLWA × Device_cap × T / L_dev × C_SSD over a
  system life cycle of T years, with C_SSD = 0.16 kgCO2e per GB (§6.6). Per year that is the
  device's embodied carbon (capacity × C_SSD) amortised over its lifetime; we amortise over
  min(wear-out lifetime, service life T): a device that does not wear out is still replaced
  after T years (FairyWREN §6.2 notes other failures dominate beyond ~10 years; the
  McAllister thesis §3.2 writes annual embodied emissions as Carbon/Device × 1/Lifetime).
- A device's yearly embodied carbon is attributed to the tenants by their share of its media
  bytes in the window (wear is what shortens its life); media bytes no tenant's stage wrote
  (the filesystem, stages without an owner) stay unattributed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

SECONDS_PER_DAY = 86_400.0
DAYS_PER_YEAR = 365.25
SECONDS_PER_YEAR = SECONDS_PER_DAY * DAYS_PER_YEAR
# The papers give capacities and carbon per decimal GB (a "1.88 TB" SSD, "0.16 kg per GB").
GB = 1e9


@dataclass(frozen=True)
class FlashAssumptions:
    """What the model assumes of every flash device (config.py: LACHESIS_FLASH_*)."""

    rated_dwpd: float = 3.5
    rated_years: float = 5.0
    service_years: float = 5.0
    kgco2e_per_gb: float = 0.16

    @property
    def pe_cycles(self) -> float:
        """Full-device media writes the flash endures (P/E cycles), from the rating."""
        return self.rated_dwpd * DAYS_PER_YEAR * self.rated_years


def dwpd(bytes_per_s: float, capacity_bytes: int) -> float:
    """Device writes per day: bytes written per day over the capacity."""
    return bytes_per_s * SECONDS_PER_DAY / capacity_bytes


def lifetime_years(media_bytes_per_s: float, capacity_bytes: int, a: FlashAssumptions) -> float | None:
    """Years until the media's P/E cycles are used up at this media write rate; None when
    nothing is written (the device does not wear out)."""
    if media_bytes_per_s <= 0:
        return None
    return a.pe_cycles * capacity_bytes / media_bytes_per_s / SECONDS_PER_YEAR


def embodied_kg(capacity_bytes: int, a: FlashAssumptions) -> float:
    return capacity_bytes / GB * a.kgco2e_per_gb


def kg_per_year(media_bytes_per_s: float, capacity_bytes: int, a: FlashAssumptions) -> float:
    """The device's embodied carbon amortised over min(wear-out lifetime, service life)."""
    life = lifetime_years(media_bytes_per_s, capacity_bytes, a)
    years = a.service_years if life is None else min(life, a.service_years)
    return embodied_kg(capacity_bytes, a) / years


def theorem2_kg(
    dlwa: float, capacity_bytes: int, system_years: float, warranty_years: float, kg_per_gb: float
) -> float:
    """FDP in CacheLib, Theorem 2: embodied kgCO2e over a system life cycle, devices replaced
    as they wear out."""
    return dlwa * capacity_bytes / GB * system_years / warranty_years * kg_per_gb


# Whole-cache write amplification (ALWA × DLWA) of the two small-object designs measured side
# by side on flash, same trace, same 400 GB: Kangaroo on an LBAD SSD 23×, FairyWREN on a ZNS
# SSD 1.89× (FairyWREN §6.4, Fig. 12; McAllister thesis §5.4.4). Both put objects > 2 KB in a
# log (LOC), so our `hybrid` engine (Kangaroo + LOC) counts as Kangaroo and `hybrid-fairywren`
# (FairyWREN + LOC) as FairyWREN.
ENGINE_WA: dict[str, float] = {"kangaroo": 23.0, "hybrid": 23.0, "fairywren": 1.89, "hybrid-fairywren": 1.89}
ENGINE_ALTERNATIVES: dict[str, str] = {
    "kangaroo": "fairywren",
    "hybrid": "hybrid-fairywren",
    "fairywren": "kangaroo",
    "hybrid-fairywren": "hybrid",
}


def ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


@dataclass(frozen=True)
class DeviceWindow:
    """One device's measured bytes over `seconds`, and what of them each tenant wrote.
    `media_bytes` is None when the device does not measure media writes."""

    host: str
    device: str
    capacity_bytes: int
    seconds: float
    host_bytes: int
    media_bytes: int | None
    # tenant -> host / media bytes its stages wrote to the device in the window.
    tenant_host_bytes: Mapping[str, float] = field(default_factory=dict)
    tenant_media_bytes: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceFootprint:
    host: str
    device: str
    capacity_bytes: int
    seconds: float
    host_bytes_per_s: float
    media_bytes_per_s: float | None
    dlwa: float | None
    dwpd: float
    lifetime_years: float | None
    embodied_kg: float
    kg_per_year: float
    # tenant -> share of the window's media bytes, and the kgCO2e/year that share carries.
    shares: dict[str, float]
    unattributed_share: float

    def tenant_kg_per_year(self, tenant: str) -> float:
        return self.shares.get(tenant, 0.0) * self.kg_per_year


def footprint(w: DeviceWindow, a: FlashAssumptions) -> DeviceFootprint:
    """Wear and carbon of one device. Without media counts the host bytes stand in for them
    (DLWA ≥ 1, so the lifetime is then an upper bound) and the DLWA is unknown."""
    host_rate = w.host_bytes / w.seconds
    media = w.media_bytes if w.media_bytes is not None else w.host_bytes
    per_tenant = w.tenant_media_bytes if w.media_bytes is not None else w.tenant_host_bytes
    media_rate = media / w.seconds
    shares = {t: b / media for t, b in sorted(per_tenant.items())} if media > 0 else {}
    return DeviceFootprint(
        host=w.host,
        device=w.device,
        capacity_bytes=w.capacity_bytes,
        seconds=w.seconds,
        host_bytes_per_s=host_rate,
        media_bytes_per_s=media_rate if w.media_bytes is not None else None,
        dlwa=ratio(w.media_bytes, w.host_bytes),
        dwpd=dwpd(host_rate, w.capacity_bytes),
        lifetime_years=lifetime_years(media_rate, w.capacity_bytes, a),
        embodied_kg=embodied_kg(w.capacity_bytes, a),
        kg_per_year=kg_per_year(media_rate, w.capacity_bytes, a),
        shares=shares,
        unattributed_share=max(0.0, 1.0 - sum(shares.values())) if media > 0 else 0.0,
    )


def with_tenant_media(w: DeviceWindow, tenant: str, media_bytes: float) -> DeviceWindow:
    """The same window had `tenant` written `media_bytes` to the device instead (host bytes
    scaled alike): what an alternative engine would have done, the others unchanged."""
    old_media = w.tenant_media_bytes.get(tenant, 0.0)
    old_host = w.tenant_host_bytes.get(tenant, 0.0)
    scale = media_bytes / old_media if old_media else 1.0
    new_host = old_host * scale
    return DeviceWindow(
        w.host,
        w.device,
        w.capacity_bytes,
        w.seconds,
        host_bytes=round(w.host_bytes - old_host + new_host),
        media_bytes=None if w.media_bytes is None else round(w.media_bytes - old_media + media_bytes),
        tenant_host_bytes={**w.tenant_host_bytes, tenant: new_host},
        tenant_media_bytes={**w.tenant_media_bytes, tenant: media_bytes},
    )


def with_dlwa(w: DeviceWindow, dlwa: float) -> DeviceWindow:
    """The same host writes at another device DLWA (another placement), every tenant's media
    bytes scaled alike."""
    return DeviceWindow(
        w.host,
        w.device,
        w.capacity_bytes,
        w.seconds,
        w.host_bytes,
        round(w.host_bytes * dlwa),
        tenant_host_bytes=dict(w.tenant_host_bytes),
        tenant_media_bytes={t: b * dlwa for t, b in w.tenant_host_bytes.items()},
    )
