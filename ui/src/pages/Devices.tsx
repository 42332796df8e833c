// Every host's flash devices: what they measured (host and media bytes, DLWA in total, per
// placement handle and over time) beside the DLWA the placement broker predicts.
import { useDevices, usePlacements } from "../api/queries";
import { useSession } from "../api/session";
import type { DeviceOut, Placement } from "../api/types";
import { Badge, NotReported, bytes, ratio, size } from "../components/common";
import { Loaded } from "../components/Loaded";
import { Table } from "../components/Table";
import { DlwaChart } from "../components/LoopCharts";
import { href } from "../router";
import { deviceHandles, dlwaGap, dlwaRows } from "../stages";

function Predicted({ d }: { d: DeviceOut }) {
  return (
    <>
      {ratio(d.predicted_dlwa)}
      {d.predicted_by ? <small className="muted"> ({d.predicted_by})</small> : null}
    </>
  );
}

function DeviceSection({ d, placements }: { d: DeviceOut; placements: Placement[] | null | undefined }) {
  const handles = deviceHandles(d, placements);
  const gap = dlwaGap(d.dlwa, d.predicted_dlwa);
  return (
    <section className="device" data-testid={`device-${d.host}-${d.name}`}>
      <h2>
        <a href={href({ page: "hosts", id: d.host })}>{d.host}</a> / {d.name}{" "}
        <Badge tone={d.kind === "measured" ? "ok" : "idle"} testId="device-kind">
          {d.kind}
        </Badge>{" "}
        <small className="muted">
          <code>{d.path}</code> · {bytes(d.size_bytes)} · {d.placement_handles} placement handle{d.placement_handles === 1 ? "" : "s"}
          {d.reclaim_unit_bytes ? ` · reclaim unit ${bytes(d.reclaim_unit_bytes)}` : ""}
        </small>
      </h2>
      <p className="figures">
        DLWA measured <strong data-testid="device-dlwa">{ratio(d.dlwa)}</strong>, predicted{" "}
        <strong data-testid="device-dlwa-predicted">
          <Predicted d={d} />
        </strong>
        {gap ? <span className="muted"> ({gap} measured over predicted)</span> : null}; host bytes{" "}
        <span data-testid="device-host-bytes">{size(d.host_bytes_written)}</span>, media bytes{" "}
        <span data-testid="device-media-bytes">{size(d.media_bytes_written)}</span>
      </p>
      {d.host_bytes_written == null ? <NotReported what="Host and media bytes" /> : null}
      <div className="charts">
        <DlwaChart rows={dlwaRows(d.series)} predicted={d.predicted_dlwa} />
        {handles.length ? (
          <Table
            className="handles-table"
            testId="device-handles"
            head={["handle", "streams", "host bytes", "media bytes", "DLWA"]}
            rows={handles}
            row={(h) => (
              <tr key={h.handle} data-testid={`handle-${h.handle}`}>
                <td>#{h.handle}</td>
                <td>{h.streams === null ? <span className="muted">—</span> : h.streams.length ? h.streams.join(", ") : <span className="muted">unused</span>}</td>
                <td>{size(h.host_bytes_written)}</td>
                <td>{size(h.media_bytes_written)}</td>
                <td data-testid="handle-dlwa">{ratio(h.dlwa)}</td>
              </tr>
            )}
          />
        ) : (
          <p className="muted">No placement handles: every write goes to one stream.</p>
        )}
      </div>
    </section>
  );
}

export function Devices() {
  const { features, access } = useSession();
  const devices = useDevices(features.devices);
  const placements = usePlacements(features.devices);
  return (
    <div>
      <h1>Devices</h1>
      <p className="muted">
        Write amplification in the device (DLWA: media bytes over host bytes) as the agents measure it, beside what the
        placement broker predicts for the streams it placed on the device's handles.
      </p>
      <Loaded
        query={devices}
        what="devices"
        empty="No agent has registered a device."
        missing={{ what: access.tenant ? "Devices (shared by all tenants)" : "Devices (this controller has no /api/v1/devices)", absent: !features.devices }}
      >
        {(rows) => (
          <>
            <Table
              testId="devices-table"
              head={["host", "device", "kind", "handles", "host bytes", "media bytes", "DLWA measured", "DLWA predicted"]}
              rows={rows}
              row={(d) => (
                <tr key={`${d.host}/${d.name}`} data-testid={`device-row-${d.host}-${d.name}`}>
                  <td>{d.host}</td>
                  <td>{d.name}</td>
                  <td>{d.kind}</td>
                  <td>{d.placement_handles}</td>
                  <td>{size(d.host_bytes_written)}</td>
                  <td>{size(d.media_bytes_written)}</td>
                  <td data-testid="row-dlwa">{ratio(d.dlwa)}</td>
                  <td data-testid="row-dlwa-predicted">
                    <Predicted d={d} />
                  </td>
                </tr>
              )}
            />
            {rows.map((d) => (
              <DeviceSection key={`${d.host}/${d.name}`} d={d} placements={placements.data} />
            ))}
          </>
        )}
      </Loaded>
    </div>
  );
}
