// Generated from api-schemas/openapi.json by `npm run gen:api` (ui/scripts/api-types.mjs).
// Do not edit: change the controller, export openapi.json, then regenerate.

export interface components {
    schemas: {
        /** AllocationCurvePoint */
        AllocationCurvePoint: {
            /**
             * Index
             * @description The measured point at or below this size.
             */
            index: number;
            /** Miss Ratio */
            miss_ratio: number;
            /** Size Bytes */
            size_bytes: number;
        };
        /** AllocationSummary */
        AllocationSummary: {
            /** Capacity Bytes */
            capacity_bytes: number;
            /**
             * Computed At
             * Format: date-time
             */
            computed_at: string;
            /** Computed By */
            computed_by: string;
            /** Epsilon Bytes */
            epsilon_bytes: number;
            /** Method */
            method: string;
            /** Optimal */
            optimal: boolean;
            /**
             * State
             * @enum {string}
             */
            state: "current" | "proposed";
            /**
             * Upper Bound
             * @description No allocation of the same curves does better.
             */
            upper_bound: number;
            /**
             * Utility
             * @description Σ weight × hit ratio.
             */
            utility: number;
        };
        /** AuditEventOut */
        AuditEventOut: {
            /**
             * Action
             * @description <kind>.<verb>, e.g. rule.update.
             */
            action: string;
            /**
             * Actor
             * @description bootstrap, anonymous (auth off) or token:<name>.
             */
            actor: string;
            /** After */
            after: {
                [key: string]: unknown;
            } | null;
            /**
             * At
             * Format: date-time
             */
            at: string;
            /** Before */
            before: {
                [key: string]: unknown;
            } | null;
            /** Id */
            id: number;
            /** Resource Kind */
            resource_kind: string;
            /** Resource Name */
            resource_name: string;
            /** Rollout Id */
            rollout_id: string | null;
            /** Tenant */
            tenant: string | null;
        };
        /**
         * BandwidthIn
         * @description Turned into a minimum hit ratio by Moirai's Eq. 5.2.
         */
        BandwidthIn: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "bandwidth";
            /**
             * Memory
             * @description Bandwidth of the cache, bytes/s.
             */
            memory: number;
            /**
             * Sla
             * @description Bandwidth the tenant must get, bytes/s.
             */
            sla: number;
            /**
             * Storage
             * @description Bandwidth of the storage back end, bytes/s.
             */
            storage: number;
        };
        /**
         * ByteRange
         * @description Byte range [start, end) of an IO; a rule matches IO overlapping it.
         */
        ByteRange: {
            /** End */
            end: number;
            /** Start */
            start: number;
        };
        /** CacheStage */
        CacheStage: {
            /**
             * Device
             * @description The host's flash device; null: its first.
             */
            device?: string | null;
            /**
             * Engine
             * @description null: loc on a host with a flash device, else dram.
             */
            engine?: ("dram" | "loc" | "kangaroo" | "hybrid" | "fairywren" | "hybrid-fairywren") | null;
            /**
             * Eviction
             * @description mrc (one shared stage partitioned by its tenants' miss-ratio curves) is refused until an agent can honour it: it would ship as lru.
             * @default lru
             * @enum {string}
             */
            eviction: "lru" | "fifo" | "mrc";
            /**
             * Exclusive
             * @description With serves: exclusive of level 1 (Moirai's global LRU): the reads of a level 1 that demotes (a dram stage in front of the remote endpoint) neither fill it nor stay in it, and it holds the clean blocks level 1 evicts and demotes to it. false: it caches level 1's misses (inclusive).
             * @default false
             */
            exclusive: boolean;
            /**
             * Hosts
             * @description null: every host.
             */
            hosts?: string[] | null;
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "cache";
            /**
             * Level
             * @default 1
             * @enum {integer}
             */
            level: 1 | 2;
            /**
             * Max Dirty Bytes
             * @default 16777216
             */
            max_dirty_bytes: number;
            /**
             * Name
             * @description What rules name as a stage target, e.g. cache/web.
             */
            name: string;
            /**
             * Owner
             * @description Tenant the stage belongs to; null: shared infrastructure.
             */
            owner?: string | null;
            /**
             * Parent
             * @description Level-2 cache stage misses go to.
             */
            parent?: string | null;
            /**
             * Serves
             * @description Server level of a two-level cache (level 2): directories under the root of the forwarding server of the hosts it applies to (agents run with --serve-listen/--serve-root; the dir of tcp://HOST:PORT/dir endpoints) whose forwarded reads it caches in front of the server's store. With a two-level allocation in force its size is the owner's a2 (with shared_with: the sum of their a2, one consolidated pool). null: a host-level stage.
             */
            serves?: string[] | null;
            /**
             * Shared With
             * @description Other tenants whose IO may go through this stage. Without it, only the owner's.
             */
            shared_with?: string[];
            /**
             * Size Bytes
             * @description Declared size; the allocation loop's share of the owner replaces it while an allocation is in force.
             */
            size_bytes: number;
            /** @description On a level-1 stage: the allocation loop splits its owner's cache between this stage and the level-2 stage it names as parent (Moirai's α, Eqs. 5.3-5.7), with these bandwidths. */
            two_level?: components["schemas"]["TwoLevel"] | null;
            /**
             * Write Mode
             * @default through
             * @enum {string}
             */
            write_mode: "through" | "back" | "around";
        };
        /** Capabilities */
        Capabilities: {
            /** Cpus */
            cpus: number;
            data_paths?: components["schemas"]["DataPaths"];
            /** Devices */
            devices: components["schemas"]["Device"][];
            kernel: components["schemas"]["Kernel"];
        };
        /** Classifier */
        Classifier: {
            /**
             * Kind
             * @enum {string}
             */
            kind: "cgroup" | "uid" | "process" | "path_prefix" | "key_prefix";
            /** Value */
            value: string;
        };
        /**
         * CurveCheckOut
         * @description The tenant's curve against its cache stage's measured hit ratio (allocation/curve_check.py).
         */
        CurveCheckOut: {
            /**
             * Installed Bytes
             * @description The size the stage is installed at, where the curve is read.
             */
            installed_bytes: number;
            /**
             * Measured Hit Ratio
             * @description Hits over the references counted at this size after the warm-up; null until enough.
             */
            measured_hit_ratio: number | null;
            /**
             * Off
             * @description The curve is off the measurement by more than the tolerance; null: no verdict yet.
             */
            off: boolean | null;
            /**
             * Predicted Hit Ratio
             * @description 1 - the curve's miss ratio at installed_bytes.
             */
            predicted_hit_ratio: number | null;
            /** Reason */
            reason: string;
            /**
             * References
             * @description References measured (after the warm-up).
             */
            references: number;
        };
        /** CurveIn */
        CurveIn: {
            /**
             * Miss Ratios
             * @description Miss ratio at each size.
             */
            miss_ratios: number[];
            /**
             * Sizes
             * @description Cache sizes in bytes, increasing.
             */
            sizes: number[];
            /**
             * Weight
             * @description Requests per second: the weight of its hit ratio.
             * @default 1
             */
            weight: number;
        };
        /** CurveOut */
        CurveOut: {
            /**
             * Algorithm
             * @enum {string}
             */
            algorithm: "shards-fixed-size" | "shards-fixed-rate";
            /** Points */
            points: components["schemas"]["MissRatioPoint"][];
            /**
             * Policy
             * @constant
             */
            policy: "lru";
            /**
             * References
             * @description 4 KiB block references the curve covers.
             */
            references: number;
            /**
             * Unit
             * @constant
             */
            unit: "bytes";
        };
        /**
         * DataPath
         * @description One data path the agent runs, the tenant classifier kinds it decides and the
         *     operations its IO carries (rules' `match.ops` it can match).
         */
        DataPath: {
            /** Classifiers */
            classifiers: ("cgroup" | "uid" | "process" | "path_prefix" | "key_prefix")[];
            /** Ops */
            ops?: ("read" | "write" | "create" | "delete")[];
        };
        /**
         * DataPaths
         * @description The data paths the agent runs; one not listed is not run.
         */
        DataPaths: {
            /** @description The FUSE switch (--mount): file IO, classified at open. */
            fuse?: components["schemas"]["DataPath"];
            /** @description The key-value front end (--kv-listen): requests, classified by key or port. */
            kv?: components["schemas"]["DataPath"];
        };
        /** DeclaredFile */
        DeclaredFile: {
            /**
             * Length
             * @description null: to the file's end.
             */
            length?: number | null;
            /**
             * Offset
             * @default 0
             */
            offset: number;
            /**
             * Path
             * @description A file under one of the host agent's mounts (mountpoint or backing directory); a directory: every regular file under it.
             */
            path: string;
        };
        /** DeclaredJobOut */
        DeclaredJobOut: {
            /**
             * Bytes Declared
             * @description As the agent sized it; null until it reports.
             */
            bytes_declared: number | null;
            /** Checksums */
            checksums: components["schemas"]["FileChecksum"][] | null;
            /** Covered Bytes */
            covered_bytes: number;
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /** Created By */
            created_by: string;
            /**
             * Deadline
             * Format: date-time
             */
            deadline: string;
            /**
             * Dispatched Bytes
             * @description Read by the agent's dispatcher for this job.
             */
            dispatched_bytes: number;
            /** Error */
            error: string | null;
            /** Files */
            files: components["schemas"]["DeclaredFile"][];
            /** Finished At */
            finished_at: string | null;
            /**
             * Foreground Bytes
             * @description Covered by foreground reads through the FUSE switch.
             */
            foreground_bytes: number;
            /** Host */
            host: string;
            /** Id */
            id: string;
            /**
             * Pace
             * @enum {string}
             */
            pace: "deadline" | "budget";
            /** Paused */
            paused: boolean;
            /** Rate Bytes Per S */
            rate_bytes_per_s: number | null;
            /** Reported At */
            reported_at: string | null;
            /**
             * Shared Bytes
             * @description Covered by the dispatcher's reads for another job.
             */
            shared_bytes: number;
            /**
             * Source
             * @description The scrub stage that declared it; null: REST.
             */
            source: string | null;
            /**
             * State
             * @enum {string}
             */
            state: "pending" | "running" | "paused" | "done" | "missed" | "failed" | "cancelled";
            /** Tenant */
            tenant: string;
        };
        /** DeclaredJobPatch */
        DeclaredJobPatch: {
            /** Pace */
            pace?: ("deadline" | "budget") | null;
            /** Paused */
            paused?: boolean | null;
            /** Rate Bytes Per S */
            rate_bytes_per_s?: number | null;
        };
        /** DeclaredJobSpec */
        DeclaredJobSpec: {
            /**
             * Deadline
             * Format: date-time
             * @description When every declared byte must have been read; in the future.
             */
            deadline: string;
            /** Files */
            files: components["schemas"]["DeclaredFile"][];
            /**
             * Host
             * @description The host whose agent reads the files.
             */
            host: string;
            /**
             * Id
             * @description null: the controller names it.
             */
            id?: string | null;
            /**
             * Pace
             * @description deadline: read at the rate that finishes a tenth of the window before the deadline, leaving the slack to foreground reads; budget: at the agent's whole budget now.
             * @default deadline
             * @enum {string}
             */
            pace: "deadline" | "budget";
            /**
             * Paused
             * @description The agent's dispatcher reads nothing for it; foreground reads still count.
             * @default false
             */
            paused: boolean;
            /**
             * Rate Bytes Per S
             * @description The job's own cap under the agent's budget.
             */
            rate_bytes_per_s?: number | null;
            /**
             * Tenant
             * @description Whose data it is.
             */
            tenant: string;
        };
        /** Detour */
        Detour: {
            to: components["schemas"]["DetourTarget"];
            /**
             * What
             * @enum {string}
             */
            what: "io" | "header";
        };
        /** DetourOut */
        DetourOut: {
            /** Errno */
            errno: number | null;
            /**
             * Hold
             * @description The IO waited for the verdict (false: a copy).
             */
            hold: boolean;
            /** Host Id */
            host_id: string;
            /**
             * Id
             * @description The agent's request id.
             */
            id: string;
            /**
             * Latency Ms
             * @description From the request's arrival to its verdict being sent.
             */
            latency_ms: number;
            /** Length */
            length: number;
            /** Offset */
            offset: number;
            /**
             * Op
             * @enum {string}
             */
            op: "read" | "write" | "create" | "delete";
            /** Path */
            path: string;
            /** Reason */
            reason: string | null;
            /** Rule */
            rule: string;
            /** Sent At */
            sent_at: string;
            /**
             * Target
             * @description The controller application.
             */
            target: string;
            /** Tenant */
            tenant: string | null;
            /** Traceparent */
            traceparent: string | null;
            /** Ttl Ms */
            ttl_ms: number | null;
            /**
             * Verdict
             * @description null for copies.
             */
            verdict: ("proceed" | "deny") | null;
        };
        /** DetourTarget */
        DetourTarget: {
            /**
             * Kind
             * @enum {string}
             */
            kind: "file" | "stage" | "controller";
            /** Target */
            target: string;
        };
        /** Device */
        Device: {
            /** Fdp */
            fdp: boolean;
            /**
             * Kind
             * @enum {string}
             */
            kind: "file" | "block" | "nvme" | "measured";
            /**
             * Name
             * @description Lower-case DNS-label-like name of a tenant or rule.
             */
            name: string;
            /** Path */
            path: string;
            /** Placement Handles */
            placement_handles: number;
            /** Reclaim Unit Bytes */
            reclaim_unit_bytes?: number;
            /** Size Bytes */
            size_bytes: number;
        };
        /** DeviceOut */
        DeviceOut: {
            /**
             * Dlwa
             * @description Media over host bytes since the agent opened the device.
             */
            dlwa: number | null;
            /** Handles */
            handles: components["schemas"]["HandleOut"][];
            /** Host */
            host: string;
            /**
             * Host Bytes Written
             * @description Since the agent opened the device.
             */
            host_bytes_written: number | null;
            /** Kind */
            kind: string;
            /** Media Bytes Written */
            media_bytes_written: number | null;
            /** Name */
            name: string;
            /** Path */
            path: string;
            /** Placement Handles */
            placement_handles: number;
            /**
             * Predicted By
             * @description simulator or model (the FDP paper's closed form).
             */
            predicted_by: string | null;
            /**
             * Predicted Dlwa
             * @description The placement broker's prediction for the streams placed on the device.
             */
            predicted_dlwa: number | null;
            /** Reclaim Unit Bytes */
            reclaim_unit_bytes: number | null;
            /** Series */
            series: components["schemas"]["DevicePoint"][];
            /** Size Bytes */
            size_bytes: number;
        };
        /** DevicePlacementOut */
        DevicePlacementOut: {
            /**
             * Computed At
             * Format: date-time
             */
            computed_at: string;
            /** Device */
            device: string;
            /** Handles */
            handles: number;
            /** Host Id */
            host_id: string;
            /**
             * Model Dlwa
             * @description The FDP paper's closed form for the same placement.
             */
            model_dlwa: number;
            /** Overprovisioning */
            overprovisioning: number;
            /**
             * Predicted By
             * @enum {string}
             */
            predicted_by: "simulator" | "model";
            /** Predicted Dlwa */
            predicted_dlwa: number;
            /**
             * Shared
             * @description Handles more than one stream writes with, and why.
             */
            shared: components["schemas"]["SharedOut"][];
            /** Streams */
            streams: components["schemas"]["StreamOut"][];
            /** Warnings */
            warnings: string[];
        };
        /** DevicePoint */
        DevicePoint: {
            /**
             * At
             * Format: date-time
             */
            at: string;
            /**
             * Dlwa
             * @description Media over host bytes written in the interval ending at `at`.
             */
            dlwa: number | null;
            /** Write Bytes Per S */
            write_bytes_per_s: number;
        };
        /** DeviceSustainability */
        DeviceSustainability: {
            /** Capacity Bytes */
            capacity_bytes: number;
            /**
             * Dlwa
             * @description Media over host bytes in the window.
             */
            dlwa: number | null;
            /**
             * Dwpd
             * @description Host bytes written per day over the capacity.
             */
            dwpd: number | null;
            /**
             * Embodied Kg
             * @description The device's embodied kgCO2e: capacity in GB x kgCO2e per GB.
             */
            embodied_kg: number;
            /** Host */
            host: string;
            /** Host Bytes Per S */
            host_bytes_per_s: number | null;
            /**
             * Kg Per Year
             * @description Embodied kgCO2e amortised over min(lifetime, service life).
             */
            kg_per_year: number | null;
            /**
             * Lifetime Years
             * @description Years until the P/E cycles are used up at the window's media rate (host rate when media is not measured); null when nothing is written.
             */
            lifetime_years: number | null;
            /**
             * Measured
             * @description False until the device has reported twice within the window; the figures are then null.
             */
            measured: boolean;
            /**
             * Media Bytes Per S
             * @description Null when the device does not measure media writes.
             */
            media_bytes_per_s: number | null;
            /** Name */
            name: string;
            /**
             * One Handle Dlwa
             * @description Modelled DLWA with every cache stream on one handle (closed form).
             */
            one_handle_dlwa: number | null;
            /** Placement Handles */
            placement_handles: number;
            /**
             * Seconds
             * @description The span of the reports in the window.
             */
            seconds: number | null;
            /**
             * Separate Handles Dlwa
             * @description Modelled DLWA with the cache streams on their own handles (closed form).
             */
            separate_handles_dlwa: number | null;
            /** Tenants */
            tenants: components["schemas"]["DeviceTenantShare"][];
            /**
             * Unattributed Share
             * @description Share of media bytes no tenant's stage wrote.
             */
            unattributed_share: number | null;
        };
        /** DeviceTenantShare */
        DeviceTenantShare: {
            /** Kg Per Year */
            kg_per_year: number;
            /**
             * Share
             * @description The tenant's share of the device's media bytes in the window.
             */
            share: number;
            /** Tenant */
            tenant: string;
        };
        /** EnrollmentOut */
        EnrollmentOut: {
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /** Host Id */
            host_id: string;
            /**
             * Redis Url
             * @description The bus URL for the agent (`lachesis-agent run --redis-url`), with its user and secret. Shown once: the controller keeps only the secret's SHA-256.
             */
            redis_url: string;
            /** Redis User */
            redis_user: string;
        };
        /**
         * FdpPlacementStage
         * @description The owner's cache stages on `device` write with `placement_handle`. It tags a tenant's
         *     own writes only: it needs an owner, and nothing is shared.
         */
        FdpPlacementStage: {
            /**
             * Device
             * @description Lower-case DNS-label-like name of a tenant or rule.
             */
            device: string;
            /**
             * Hosts
             * @description null: every host.
             */
            hosts?: string[] | null;
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "fdp_placement";
            /**
             * Name
             * @description What rules name as a stage target, e.g. cache/web.
             */
            name: string;
            /**
             * Owner
             * @description The tenant whose cache stages' writes on the device carry the handle.
             */
            owner: string;
            /** Placement Handle */
            placement_handle: number;
            /**
             * Shared With
             * @description Other tenants whose IO may go through this stage. Without it, only the owner's.
             */
            shared_with?: string[];
        };
        /** FieldError */
        FieldError: {
            /** Column */
            column?: number | null;
            /** Field */
            field: string;
            /** Line */
            line?: number | null;
            /** Message */
            message: string;
        };
        /** FileChecksum */
        FileChecksum: {
            /**
             * Crc32
             * @description CRC-32 of the CRC-32s (little endian) of the range's bytes in each 64 KiB block aligned to file offsets.
             */
            crc32: number;
            /** Length */
            length: number;
            /** Offset */
            offset: number;
            /** Path */
            path: string;
        };
        /** FixedSizeIn */
        FixedSizeIn: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "fixed_size";
            /** Size Bytes */
            size_bytes: number;
        };
        /** GuaranteeBody */
        GuaranteeBody: {
            /** Guarantee */
            guarantee: components["schemas"]["MinHitRatioIn"] | components["schemas"]["BandwidthIn"] | components["schemas"]["FixedSizeIn"];
        };
        /** GuaranteeOut */
        GuaranteeOut: {
            /** Guarantee */
            guarantee: components["schemas"]["MinHitRatioIn"] | components["schemas"]["BandwidthIn"] | components["schemas"]["FixedSizeIn"];
            /** Tenant */
            tenant: string;
        };
        /** HandleOut */
        HandleOut: {
            /** Dlwa */
            dlwa: number | null;
            /** Handle */
            handle: number;
            /** Host Bytes Written */
            host_bytes_written: number;
            /** Media Bytes Written */
            media_bytes_written: number | null;
        };
        /** Health */
        Health: {
            /**
             * Status
             * @constant
             */
            status: "ok";
        };
        /** HostOut */
        HostOut: {
            /** Acked Generation */
            acked_generation: number;
            /** Agent Version */
            agent_version: string;
            /**
             * Alive
             * @description Whether the agent's heartbeat key exists; null when Redis cannot be asked.
             */
            alive: boolean | null;
            capabilities: components["schemas"]["Capabilities"];
            /** Desired Generation */
            desired_generation: number;
            /**
             * Enrolled At
             * Format: date-time
             * @description First registration.
             */
            enrolled_at: string;
            /** Id */
            id: string;
            /**
             * Last Seen
             * Format: date-time
             */
            last_seen: string;
            /**
             * Registered At
             * Format: date-time
             * @description Latest registration (agent start or reconnect).
             */
            registered_at: string;
        };
        /** Kernel */
        Kernel: {
            /** Btf */
            btf: boolean;
            /** Fuse */
            fuse: boolean;
            /** Io Uring */
            io_uring: boolean;
            /** Release */
            release: string;
        };
        /**
         * LevelOut
         * @description One level of a tenant's two-level cache, summed over the hosts that report it.
         */
        LevelOut: {
            /**
             * Demoted Blocks
             * @description Host level: clean evicted blocks queued for the server level; server level (exclusive): demoted blocks taken. Null: none reported (no demotion).
             */
            demoted_blocks?: number | null;
            /**
             * Demotion Hits
             * @description Server level: hits on blocks it holds because level 1 demoted them.
             */
            demotion_hits?: number | null;
            /**
             * Exclusive
             * @description Server level: holds what level 1 demotes rather than what it reads.
             * @default false
             */
            exclusive: boolean;
            /**
             * Hit Ratio
             * @description hits / (hits + misses); null before the level saw a read.
             */
            hit_ratio: number | null;
            /**
             * Hits
             * @description Block reads the level served, summed over hosts; null: no report yet.
             */
            hits: number | null;
            /**
             * Hosts
             * @description Hosts reporting the level's stage.
             */
            hosts: string[];
            /**
             * Installed Bytes
             * @description What the reporting hosts' engines hold, summed; null: no report yet.
             */
            installed_bytes: number | null;
            /**
             * Level
             * @enum {string}
             */
            level: "host" | "server";
            /** Misses */
            misses: number | null;
            /**
             * Shipped Bytes
             * @description Size the controller ships (a1 or a2 while a split is in force); null: not shipped to any host.
             */
            shipped_bytes: number | null;
            /** Stage */
            stage: string;
        };
        /** LogStage */
        LogStage: {
            /**
             * Dir
             * @description Where the log writer keeps its log on the host.
             */
            dir: string;
            /**
             * Hosts
             * @description null: every host.
             */
            hosts?: string[] | null;
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "log";
            /**
             * Name
             * @description What rules name as a stage target, e.g. cache/web.
             */
            name: string;
            /**
             * Owner
             * @description Tenant the stage belongs to; null: shared infrastructure.
             */
            owner?: string | null;
            /**
             * Shared With
             * @description Other tenants whose IO may go through this stage. Without it, only the owner's.
             */
            shared_with?: string[];
        };
        /**
         * Match
         * @description IO header fields a rule matches; an absent or null field matches anything.
         */
        Match: {
            /** Key Prefix */
            key_prefix?: string | null;
            /** Ops */
            ops?: ("read" | "write" | "create" | "delete")[];
            /** Path Prefix */
            path_prefix?: string | null;
            range?: components["schemas"]["ByteRange"] | null;
            /** Tenant */
            tenant?: string | null;
        };
        /** MinHitRatioIn */
        MinHitRatioIn: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "min_hit_ratio";
            /** Ratio */
            ratio: number;
        };
        /** MissRatioPoint */
        MissRatioPoint: {
            /**
             * Miss Ratio
             * @description LRU miss ratio of the tenant's 4 KiB block references at that size.
             */
            miss_ratio: number;
            /**
             * Size Bytes
             * @description Cache size.
             */
            size_bytes: number;
        };
        /** PlacementRequest */
        PlacementRequest: {
            /**
             * Overprovisioning
             * @description The device's spare share of flash.
             * @default 0.07
             */
            overprovisioning: number;
            /**
             * Reclaim Units
             * @description Reclaim units the simulator models.
             * @default 1024
             */
            reclaim_units: number;
            /**
             * Simulate
             * @description Predict with the simulated SSD (else the closed form).
             * @default true
             */
            simulate: boolean;
            /** Streams */
            streams: components["schemas"]["StreamIn"][];
        };
        /** PolicyOut */
        PolicyOut: {
            /**
             * Compiled
             * @description The tenants, stages and rules it compiled to.
             */
            compiled: {
                [key: string]: unknown;
            };
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /** Created By */
            created_by: string;
            /**
             * Document
             * @description The document as it was sent.
             */
            document: string;
            /** Name */
            name: string;
            /** Rollout Id */
            rollout_id: string | null;
            /** Tenants */
            tenants: string[];
            /** Version */
            version: number;
        };
        /** PolicyResult */
        PolicyResult: {
            /**
             * Diff
             * @description tenants, rules and stages added/removed/changed overall, and per host under hosts.
             */
            diff: {
                [key: string]: unknown;
            };
            /** Dry Run */
            dry_run: boolean;
            /** Name */
            name: string;
            /**
             * Rollout Id
             * @description Rollout shipping the change; null on a dry run.
             */
            rollout_id: string | null;
            /**
             * Version
             * @description Version this document has (dry run: would have) once applied.
             */
            version: number;
            /**
             * Warnings
             * @description Verifier warnings (check, rules, message).
             */
            warnings: {
                [key: string]: unknown;
            }[];
        };
        /**
         * Problem
         * @description application/problem+json (RFC 9457). `errors` names each bad field of the request.
         */
        Problem: {
            /** Detail */
            detail: string;
            /** Errors */
            errors?: components["schemas"]["FieldError"][] | null;
            /** Instance */
            instance?: string | null;
            /** Status */
            status: number;
            /** Title */
            title: string;
            /** Type */
            type: string;
        } & {
            [key: string]: unknown;
        };
        /** ProposalOut */
        ProposalOut: {
            /**
             * Gain
             * @description Utility over the current allocation's under the same curves.
             */
            gain: number | null;
            summary: components["schemas"]["AllocationSummary"];
            /** Tenants */
            tenants: {
                [key: string]: components["schemas"]["TenantShare"];
            };
        };
        /** ProposalRequest */
        ProposalRequest: {
            /** Capacity Bytes */
            capacity_bytes: number;
            /**
             * Curves
             * @description Curves to use (and keep) instead of the stored ones, by tenant.
             */
            curves?: {
                [key: string]: components["schemas"]["CurveIn"];
            } | null;
            /**
             * Epsilon Bytes
             * @description Increment; default 0.001 × capacity.
             */
            epsilon_bytes?: number | null;
            /**
             * Guarantees
             * @description Guarantees for this proposal only, overriding the stored ones.
             */
            guarantees?: {
                [key: string]: components["schemas"]["MinHitRatioIn"] | components["schemas"]["BandwidthIn"] | components["schemas"]["FixedSizeIn"];
            } | null;
            /**
             * Idle
             * @description Tenants whose space is reclaimed.
             */
            idle?: string[];
            /**
             * Method
             * @default optimal
             * @enum {string}
             */
            method: "optimal" | "waterfill";
        };
        /** QosStage */
        QosStage: {
            /**
             * Hosts
             * @description null: every host.
             */
            hosts?: string[] | null;
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "qos";
            /** Max Bandwidth Bytes Per S */
            max_bandwidth_bytes_per_s?: number | null;
            /** Max Iops */
            max_iops?: number | null;
            /**
             * Min Bandwidth Bytes Per S
             * @description Bytes/s reserved in each host's IO scheduler: the owner's queued IO is served ahead of every weight until it has had this much (dmClock's reservation). At most max_bandwidth_bytes_per_s.
             */
            min_bandwidth_bytes_per_s?: number | null;
            /**
             * Name
             * @description What rules name as a stage target, e.g. cache/web.
             */
            name: string;
            /**
             * Owner
             * @description Tenant the stage belongs to; null: shared infrastructure.
             */
            owner?: string | null;
            /**
             * Priority
             * @description The owner's weight in each host's IO scheduler beyond reservations (high 32, normal 8, low 2): queued IO of a high tenant goes 4 times as often as a normal one's, 16 times as often as a low one's.
             * @default normal
             * @enum {string}
             */
            priority: "high" | "normal" | "low";
            /**
             * Shared With
             * @description Other tenants whose IO may go through this stage. Without it, only the owner's.
             */
            shared_with?: string[];
        };
        /** Readiness */
        Readiness: {
            /** Checks */
            checks: {
                [key: string]: string;
            };
            /** Leader */
            leader: boolean;
            /**
             * Status
             * @constant
             */
            status: "ok";
        };
        /** ReplicaSetStage */
        ReplicaSetStage: {
            /**
             * Hosts
             * @description null: every host.
             */
            hosts?: string[] | null;
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "replica_set";
            /**
             * Name
             * @description What rules name as a stage target, e.g. cache/web.
             */
            name: string;
            /**
             * Owner
             * @description Tenant the stage belongs to; null: shared infrastructure.
             */
            owner?: string | null;
            /**
             * Read Set
             * @description Reads go to one of these.
             */
            read_set: string[];
            /**
             * Shared With
             * @description Other tenants whose IO may go through this stage. Without it, only the owner's.
             */
            shared_with?: string[];
            /**
             * Write Set
             * @description Every write goes to all of these.
             */
            write_set: string[];
        };
        /** RestoredResource */
        RestoredResource: {
            /**
             * Kind
             * @enum {string}
             */
            kind: "tenant" | "stage" | "rule" | "policy" | "allocation" | "placement";
            /**
             * Name
             * @description Its name; a policy version is name/version, a placement host/device.
             */
            name: string;
        };
        /** ResumeOut */
        ResumeOut: {
            /**
             * Resumed
             * @description Rollouts whose held quiesce was ended.
             */
            resumed: string[];
        };
        /** RolloutOut */
        RolloutOut: {
            /** Cause */
            cause: string;
            /** Completed At */
            completed_at: string | null;
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /**
             * Deadline
             * Format: date-time
             */
            deadline: string;
            /** Id */
            id: string;
            /**
             * Phase
             * @description Two-phase rollouts (changes that move flows, switch operations): the phase reached; hold: a switch quiesce waiting for its resume. Null: one phase.
             */
            phase: ("quiesce" | "hold" | "install") | null;
            /** Reason */
            reason: string | null;
            /**
             * Restored
             * @description After a rollback: the resources the database got back (what the hosts run again).
             */
            restored?: components["schemas"]["RestoredResource"][] | null;
            /**
             * Rolled Back By
             * @description Rollout that rolled this one's hosts back after it failed.
             */
            rolled_back_by: string | null;
            /**
             * State
             * @enum {string}
             */
            state: "pending" | "succeeded" | "failed" | "timed_out";
            /** Targets */
            targets: components["schemas"]["RolloutTargetOut"][];
            /** Traceparent */
            traceparent: string | null;
        };
        /** RolloutTargetOut */
        RolloutTargetOut: {
            /** Acked At */
            acked_at: string | null;
            /** Drained At */
            drained_at: string | null;
            /** Generation */
            generation: number;
            /** Host Id */
            host_id: string;
            /**
             * Phase
             * @description quiesce: phase 1 sent; drained: the host quiesced and drained the moving flows; install: the new rules are sent (also every one-phase target).
             * @enum {string}
             */
            phase: "quiesce" | "drained" | "install";
            /** Reason */
            reason: string | null;
            /**
             * Status
             * @enum {string}
             */
            status: "pending" | "applied" | "rejected";
        };
        /** RuleChange */
        RuleChange: {
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /** Detours */
            detours: components["schemas"]["Detour"][];
            /** Hosts */
            hosts: string[] | null;
            match: components["schemas"]["Match"];
            /** Name */
            name: string;
            /** Priority */
            priority: number;
            /**
             * Rollout Id
             * @description Rollout that ships this change to the hosts.
             */
            rollout_id: string;
            /**
             * Updated At
             * Format: date-time
             */
            updated_at: string;
        };
        /** RuleOut */
        RuleOut: {
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /** Detours */
            detours: components["schemas"]["Detour"][];
            /** Hosts */
            hosts: string[] | null;
            match: components["schemas"]["Match"];
            /** Name */
            name: string;
            /** Priority */
            priority: number;
            /**
             * Updated At
             * Format: date-time
             */
            updated_at: string;
        };
        /** RuleSpec */
        RuleSpec: {
            /**
             * Detours
             * @description A file target is an absolute, normal path or tcp://HOST:PORT/...; no control characters.
             */
            detours: components["schemas"]["Detour"][];
            /**
             * Hosts
             * @description Hosts the rule is installed on; null (the default) means every host.
             */
            hosts?: string[] | null;
            /** @description path_prefix: an absolute, normal path; path_prefix and key_prefix: at most 4096 characters, no control characters. */
            match: components["schemas"]["Match"];
            /**
             * Name
             * @description Lower-case DNS-label-like name of a tenant or rule.
             */
            name: string;
            /**
             * Priority
             * @description Rules are evaluated in ascending priority, then name.
             */
            priority: number;
        };
        /** Scope */
        Scope: {
            /** @description IO header match of the flow; null: all IO. */
            flow?: components["schemas"]["Match"] | null;
            /**
             * Hosts
             * @description Hosts to act on; null: every host.
             */
            hosts?: string[] | null;
        };
        /**
         * ScrubStage
         * @description A recurring scrub (declared maintenance IO, DINGOS): every `every_s` the controller
         *     declares a job on each of the stage's hosts that reads `paths` by `window_s` later; the
         *     agent counts foreground reads for it and reads the rest under its budget. Nothing ships
         *     as a data-plane stage; rules pass over it.
         */
        ScrubStage: {
            /**
             * Every S
             * @description A job is declared this long after the previous one was, once it finished.
             */
            every_s: number;
            /**
             * Hosts
             * @description null: every host.
             */
            hosts?: string[] | null;
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "scrub";
            /**
             * Name
             * @description What rules name as a stage target, e.g. cache/web.
             */
            name: string;
            /**
             * Owner
             * @description The tenant whose data it reads.
             */
            owner: string;
            /**
             * Pace
             * @description deadline: read at the rate that finishes a tenth of the window early, leaving the slack to foreground reads; budget: at the agent's whole budget at once.
             * @default deadline
             * @enum {string}
             */
            pace: "deadline" | "budget";
            /**
             * Paths
             * @description Files or directories (every regular file under one) in the hosts' FUSE namespace, e.g. /archive (or host paths under a mountpoint).
             */
            paths: string[];
            /**
             * Rate Bytes Per S
             * @description Each job's cap under the agent's budget.
             */
            rate_bytes_per_s?: number | null;
            /**
             * Shared With
             * @description Other tenants whose IO may go through this stage. Without it, only the owner's.
             */
            shared_with?: string[];
            /**
             * Window S
             * @description Each job's deadline, after its declaration; null: every_s.
             */
            window_s?: number | null;
        };
        /** SeriesPoint */
        SeriesPoint: {
            /**
             * At
             * Format: date-time
             */
            at: string;
            /**
             * Hit Ratio
             * @description Flash cache hit ratio; null until caches report hits.
             */
            hit_ratio: number | null;
            /** Read Bytes Per S */
            read_bytes_per_s: number;
            /** Read Iops */
            read_iops: number;
            /** Write Bytes Per S */
            write_bytes_per_s: number;
            /** Write Iops */
            write_iops: number;
        };
        /** SharedOut */
        SharedOut: {
            /** Handle */
            handle: number;
            /** Reason */
            reason: string;
            /** Streams */
            streams: string[];
        };
        /** StageChange */
        StageChange: {
            /**
             * Declared
             * @description The declaration, as given (defaults filled in).
             */
            declared: {
                [key: string]: unknown;
            };
            /** Hosts */
            hosts: components["schemas"]["StageHost"][];
            /** Kind */
            kind: string;
            /** Name */
            name: string;
            /** Owner */
            owner: string | null;
            /** Rollout Id */
            rollout_id: string;
            /**
             * Source
             * @description api, or policy/NAME for a stage a policy declares.
             */
            source: string;
        };
        /**
         * StageHost
         * @description One host's instance of a stage: what desired state asks for and what the agent reports.
         */
        StageHost: {
            /**
             * Allocated Bytes
             * @description Cache size shipped to the host (the allocation while one is in force).
             */
            allocated_bytes: number | null;
            /** Bytes Read Hit */
            bytes_read_hit: number | null;
            /** Bytes Read Miss */
            bytes_read_miss: number | null;
            /** Bytes Written */
            bytes_written: number | null;
            /**
             * Demoted Blocks
             * @description Two-level caches with demotion: a level-1 stage's evicted blocks queued for the server level, a server-level stage's demoted blocks taken; null: none reported.
             */
            demoted_blocks?: number | null;
            /**
             * Demotion Hits
             * @description A server-level stage's hits on blocks it holds because level 1 demoted them.
             */
            demotion_hits?: number | null;
            /** Dirty Bytes */
            dirty_bytes: number | null;
            /** Evictions */
            evictions: number | null;
            /**
             * Front End
             * @description The data path running the stage: fs (the FUSE switch) or kv (the key-value front end); null before a report.
             */
            front_end?: string | null;
            /**
             * Hit Ratio
             * @description Hits over block reads since the stage was built.
             */
            hit_ratio: number | null;
            /** Hits */
            hits: number | null;
            /** Host Id */
            host_id: string;
            /**
             * Installed Bytes
             * @description Size the engine holds now.
             */
            installed_bytes: number | null;
            /** Misses */
            misses: number | null;
            /**
             * Parts
             * @description A flash cache's engine parts with their handles, where the host reports them (the key-value front end).
             */
            parts?: components["schemas"]["StagePartOut"][] | null;
            /** Reported At */
            reported_at: string | null;
            /**
             * Series
             * @description Per reporting interval, oldest first (bounded).
             */
            series: components["schemas"]["StagePointOut"][];
            /** Writebacks */
            writebacks: number | null;
        };
        /** StageOut */
        StageOut: {
            /**
             * Declared
             * @description The declaration, as given (defaults filled in).
             */
            declared: {
                [key: string]: unknown;
            };
            /** Hosts */
            hosts: components["schemas"]["StageHost"][];
            /** Kind */
            kind: string;
            /** Name */
            name: string;
            /** Owner */
            owner: string | null;
            /**
             * Source
             * @description api, or policy/NAME for a stage a policy declares.
             */
            source: string;
        };
        /**
         * StagePartOut
         * @description One engine part of a flash cache stage as the host reports it.
         */
        StagePartOut: {
            /**
             * Dram Bytes
             * @description DRAM of the part's index and buffers; null where the host does not report it.
             */
            dram_bytes?: number | null;
            /** Flash Bytes Written */
            flash_bytes_written: number;
            /** Gets */
            gets: number;
            /**
             * Handles
             * @description The placement handles the part writes with (kangaroo: KLog, KSet; fairywren: FwLog, hot subsets, cold subsets).
             */
            handles: number[];
            /** Hits */
            hits: number;
            /** Objects */
            objects: number;
            /**
             * Part
             * @description kangaroo or fairywren (small objects), or loc (the log, large objects).
             */
            part: string;
        };
        /**
         * StagePatch
         * @description Configure a stage: the fields to change (Moirai's configure; resize with size_bytes).
         */
        StagePatch: {
            /** Engine */
            engine?: ("dram" | "loc" | "kangaroo" | "hybrid" | "fairywren" | "hybrid-fairywren") | null;
            /** Eviction */
            eviction?: ("lru" | "fifo" | "mrc") | null;
            /** Max Bandwidth Bytes Per S */
            max_bandwidth_bytes_per_s?: number | null;
            /** Max Dirty Bytes */
            max_dirty_bytes?: number | null;
            /** Max Iops */
            max_iops?: number | null;
            /** Size Bytes */
            size_bytes?: number | null;
            /** Write Mode */
            write_mode?: ("through" | "back" | "around") | null;
        };
        /** StagePointOut */
        StagePointOut: {
            /**
             * At
             * Format: date-time
             */
            at: string;
            /**
             * Hit Ratio
             * @description Hits over block reads in the interval ending at `at`.
             */
            hit_ratio: number | null;
            /** Installed Bytes */
            installed_bytes: number | null;
            /**
             * Size Bytes
             * @description The size desired state asked for then.
             */
            size_bytes: number | null;
        };
        /** StreamIn */
        StreamIn: {
            /**
             * Part
             * @description Cache engine part: loc, klog, fwlog, fwsets, fwcold write logs; kset, set-assoc rewrite at random.
             * @enum {string}
             */
            part: "loc" | "klog" | "kset" | "set-assoc" | "fwlog" | "fwsets" | "fwcold";
            /**
             * Space
             * @description Share of the device's logical space.
             */
            space: number;
            /**
             * Tenant
             * @description Lower-case DNS-label-like name of a tenant or rule.
             */
            tenant: string;
            /**
             * Trimmed
             * @description A log that deallocates each segment before rewriting it.
             * @default false
             */
            trimmed: boolean;
            /**
             * Writes
             * @description Share of the device's host writes.
             */
            writes: number;
        };
        /** StreamOut */
        StreamOut: {
            /** Handle */
            handle: number;
            /** Part */
            part: string;
            /** Space */
            space: number;
            /** Tenant */
            tenant: string;
            /** Trimmed */
            trimmed: boolean;
            /** Writes */
            writes: number;
        };
        /** Summaries */
        Summaries: {
            current: components["schemas"]["AllocationSummary"] | null;
            proposed: components["schemas"]["AllocationSummary"] | null;
        };
        /** SummaryDevice */
        SummaryDevice: {
            /**
             * Dlwa
             * @description Media bytes over host bytes written; null if the device does not report media writes.
             */
            dlwa: number | null;
            /** Host Id */
            host_id: string;
            /** Name */
            name: string;
            /**
             * Write Bytes Per S
             * @description Null until the device has reported twice.
             */
            write_bytes_per_s: number | null;
        };
        /** SummaryTenant */
        SummaryTenant: {
            /** Hit Ratio */
            hit_ratio: number | null;
            /** Iops */
            iops: number;
            /** Name */
            name: string;
        };
        /** SustainabilityAssumptions */
        SustainabilityAssumptions: {
            /**
             * Kgco2E Per Gb
             * @description Embodied kgCO2e per GB of flash (LACHESIS_FLASH_KGCO2E_PER_GB).
             */
            kgco2e_per_gb: number;
            /**
             * Pe Cycles
             * @description Full-device media writes the flash endures: rated DWPD x 365.25 x rated years.
             */
            pe_cycles: number;
            /**
             * Rated Dwpd
             * @description Rated device writes per day (LACHESIS_FLASH_RATED_DWPD).
             */
            rated_dwpd: number;
            /**
             * Rated Years
             * @description Years the rating holds for (LACHESIS_FLASH_RATED_YEARS).
             */
            rated_years: number;
            /**
             * Service Years
             * @description Years a device serves before it is replaced anyway (LACHESIS_FLASH_SERVICE_YEARS).
             */
            service_years: number;
            /**
             * Window S
             * @description The window the rates are measured over (at most what telemetry keeps).
             */
            window_s: number;
        };
        /** SustainabilityComparison */
        SustainabilityComparison: {
            assumptions: components["schemas"]["SustainabilityAssumptions"];
            /** Scenarios */
            scenarios: components["schemas"]["SustainabilityScenario"][];
            /** Tenant */
            tenant: string;
        };
        /** SustainabilityDevices */
        SustainabilityDevices: {
            assumptions: components["schemas"]["SustainabilityAssumptions"];
            /** Devices */
            devices: components["schemas"]["DeviceSustainability"][];
        };
        /** SustainabilityScenario */
        SustainabilityScenario: {
            /**
             * Dlwa
             * @description The tenant's media over host bytes.
             */
            dlwa: number | null;
            /** Engine */
            engine: string | null;
            /** Kg Per Year */
            kg_per_year: number;
            /**
             * Lifetime Years
             * @description The shortest lifetime among the tenant's devices.
             */
            lifetime_years: number | null;
            /**
             * Name
             * @description current, the other engine (kangaroo or fairywren), separate handles, one handle.
             */
            name: string;
            /**
             * Source
             * @description measured, or how it is modelled.
             */
            source: string;
            /**
             * Wa
             * @description The tenant's media bytes over its given bytes.
             */
            wa: number | null;
        };
        /** SustainabilityTenants */
        SustainabilityTenants: {
            assumptions: components["schemas"]["SustainabilityAssumptions"];
            /** Tenants */
            tenants: components["schemas"]["TenantSustainability"][];
        };
        /** TailLatencyOut */
        TailLatencyOut: {
            /** Stages */
            stages: components["schemas"]["TailLatencyStageOut"][];
        };
        /**
         * TailLatencyStage
         * @description Two modes. With `candidates` (local replicas): reads are spread over them. With `servers`
         *     (remote endpoints): the tail-latency routing application (sRoute §6.5.1): the owner's IO
         *     goes to servers[0]; when its recent latency exceeds `alpha` times its long-run mean, the
         *     controller forwards the owner's writes into a log on the least loaded other server (reads
         *     of them follow, by delegates), and once it recovers reclaims them at `reclaim_bytes_per_s`.
         */
        TailLatencyStage: {
            /**
             * Alpha
             * @description Forward when recent latency > alpha x long-run mean.
             * @default 2
             */
            alpha: number;
            /**
             * Candidates
             * @description Replicas a read may be sent to (at least 2, or use servers).
             */
            candidates?: string[];
            /**
             * Enter Reports
             * @description Forward only once the endpoint is slow in this many of the agents' reports in a row (1: on the first).
             * @default 2
             */
            enter_reports: number;
            /**
             * Hedge After Ms
             * @description Hedged reads: not done by any agent, so refused when set (nothing accepted that is not enforced).
             */
            hedge_after_ms?: number | null;
            /**
             * Hosts
             * @description null: every host.
             */
            hosts?: string[] | null;
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "tail_latency";
            /**
             * Name
             * @description What rules name as a stage target, e.g. cache/web.
             */
            name: string;
            /**
             * Owner
             * @description Tenant the stage belongs to; null: shared infrastructure.
             */
            owner?: string | null;
            /**
             * Reclaim Bytes Per S
             * @description Pace of copying forwarded data back.
             * @default 67108864
             */
            reclaim_bytes_per_s: number;
            /**
             * Servers
             * @description tcp://HOST:PORT/dir endpoints: the first is the owner's, writes may be forwarded to the others.
             */
            servers?: string[];
            /**
             * Shared With
             * @description Other tenants whose IO may go through this stage. Without it, only the owner's.
             */
            shared_with?: string[];
        };
        /** TailLatencyStageOut */
        TailLatencyStageOut: {
            /** Alpha */
            alpha: number;
            /**
             * Baseline Us
             * @description The long-run mean when forwarding began.
             */
            baseline_us: number | null;
            /**
             * Endpoint
             * @description servers[0]: the owner's endpoint, tcp://HOST:PORT/dir.
             */
            endpoint: string;
            /**
             * Forwarded Bytes
             * @description Bytes written into the forwarding log (all hosts).
             */
            forwarded_bytes: number | null;
            /** Forwarded To */
            forwarded_to: string | null;
            /**
             * Forwards
             * @description Times the owner's writes were forwarded.
             */
            forwards: number;
            /**
             * Held Bytes
             * @description Bytes the log still holds.
             */
            held_bytes: number | null;
            /** Mean Us */
            mean_us: number | null;
            /** Recent Us */
            recent_us: number | null;
            /**
             * Reclaim Progress
             * @description reclaimed / (reclaimed + held); null without a log.
             */
            reclaim_progress: number | null;
            /**
             * Reclaimed Bytes
             * @description Bytes copied back to the endpoint.
             */
            reclaimed_bytes: number | null;
            /** Reclaims */
            reclaims: number;
            /**
             * Requests
             * @description Requests the endpoint answered, as last reported.
             */
            requests: number | null;
            /**
             * Slow
             * @description The agent's own flag for the endpoint; null before any report.
             */
            slow: boolean | null;
            /** Stage */
            stage: string;
            /**
             * State
             * @description normal, forwarding or reclaiming.
             */
            state: string;
            /** Tenant */
            tenant: string;
        };
        /** TelemetrySummary */
        TelemetrySummary: {
            /** Devices */
            devices: components["schemas"]["SummaryDevice"][];
            /** Hit Ratio */
            hit_ratio: number | null;
            /** Tenants */
            tenants: components["schemas"]["SummaryTenant"][];
            /** Total Iops */
            total_iops: number;
        };
        /** TenantAllocationOut */
        TenantAllocationOut: {
            current: components["schemas"]["TenantShare"] | null;
            /** @description Is the tenant's curve right? Null: it has no reporting cache stage. */
            curve_check?: components["schemas"]["CurveCheckOut"] | null;
            /** Guarantee */
            guarantee: (components["schemas"]["MinHitRatioIn"] | components["schemas"]["BandwidthIn"] | components["schemas"]["FixedSizeIn"]) | null;
            proposed: components["schemas"]["TenantShare"] | null;
            /** Tenant */
            tenant: string;
        };
        /** TenantChange */
        TenantChange: {
            /** Classifiers */
            classifiers: components["schemas"]["Classifier"][];
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /** Description */
            description: string | null;
            /** Name */
            name: string;
            /**
             * Rollout Id
             * @description Rollout that ships this change to the hosts.
             */
            rollout_id: string;
            /**
             * Updated At
             * Format: date-time
             */
            updated_at: string;
        };
        /** TenantDeviceShare */
        TenantDeviceShare: {
            /** Host */
            host: string;
            /** Kg Per Year */
            kg_per_year: number;
            /** Name */
            name: string;
            /** Share */
            share: number;
        };
        /** TenantOut */
        TenantOut: {
            /** Classifiers */
            classifiers: components["schemas"]["Classifier"][];
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /** Description */
            description: string | null;
            /** Name */
            name: string;
            /**
             * Updated At
             * Format: date-time
             */
            updated_at: string;
        };
        /** TenantShare */
        TenantShare: {
            curve_point: components["schemas"]["AllocationCurvePoint"];
            /** Hit Ratio */
            hit_ratio: number;
            /** Idle */
            idle: boolean;
            /** Reserved Bytes */
            reserved_bytes: number;
            /** Size Bytes */
            size_bytes: number;
            /** Weight */
            weight: number;
        };
        /** TenantSpec */
        TenantSpec: {
            /**
             * Classifiers
             * @description How the agents recognise this tenant's IO; any classifier matching is enough. A path_prefix is an absolute, normal path (in the FUSE mounts' namespace), a uid a decimal number, a cgroup the cgroup v2 path /proc/PID/cgroup shows, relative to the cgroup2 root (/analytics, not a host path under /sys/fs/cgroup); no value holds control characters. A classifier that a data path a registered host runs cannot decide is refused (422 not-enforced).
             */
            classifiers: components["schemas"]["Classifier"][];
            /** Description */
            description?: string | null;
            /**
             * Name
             * @description Lower-case DNS-label-like name of a tenant or rule.
             */
            name: string;
        };
        /** TenantSustainability */
        TenantSustainability: {
            /**
             * Alwa
             * @description Host bytes over given bytes.
             */
            alwa: number | null;
            /** Devices */
            devices: components["schemas"]["TenantDeviceShare"][];
            /**
             * Dlwa
             * @description Media bytes over host bytes.
             */
            dlwa: number | null;
            /**
             * Dwpd
             * @description Device writes per day the tenant causes, summed over its devices.
             */
            dwpd: number;
            /**
             * Engines
             * @description Engines of the tenant's flash cache stages, as reported.
             */
            engines: string[];
            /**
             * Given Bytes
             * @description Bytes the tenant's flash cache stages were asked to hold in the window (written through, and read misses filled).
             */
            given_bytes: number;
            /**
             * Host Bytes
             * @description Bytes its stages wrote to devices (placement handles) in the window.
             */
            host_bytes: number;
            /**
             * Kg Per Year
             * @description Its share of its devices' embodied kgCO2e per year.
             */
            kg_per_year: number;
            /**
             * Lifetime Years
             * @description The shortest projected lifetime among the devices it writes to.
             */
            lifetime_years: number | null;
            /** Media Bytes */
            media_bytes: number | null;
            /** Name */
            name: string;
            /**
             * Wa
             * @description ALWA x DLWA: media bytes over given bytes.
             */
            wa: number | null;
        };
        /** TenantTelemetryOut */
        TenantTelemetryOut: {
            curve: components["schemas"]["CurveOut"] | null;
            /**
             * Series
             * @description Rates over each reporting interval, oldest first (bounded).
             */
            series: components["schemas"]["SeriesPoint"][];
            /** Tenant */
            tenant: string;
            /**
             * Updated At
             * @description When an agent last reported the tenant; null if never.
             */
            updated_at: string | null;
        };
        /** TokenCreated */
        TokenCreated: {
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /** Created By */
            created_by: string;
            /** Id */
            id: string;
            /** Name */
            name: string;
            /** Revoked At */
            revoked_at: string | null;
            /**
             * Role
             * @enum {string}
             */
            role: "admin" | "operator" | "viewer";
            /** Tenant */
            tenant: string | null;
            /**
             * Token
             * @description The bearer secret. Shown only in this response; the controller keeps a hash.
             */
            token: string;
        };
        /** TokenOut */
        TokenOut: {
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /** Created By */
            created_by: string;
            /** Id */
            id: string;
            /** Name */
            name: string;
            /** Revoked At */
            revoked_at: string | null;
            /**
             * Role
             * @enum {string}
             */
            role: "admin" | "operator" | "viewer";
            /** Tenant */
            tenant: string | null;
        };
        /** TokenSpec */
        TokenSpec: {
            /**
             * Name
             * @description Unique label of the token, shown in the audit trail as token:<name>.
             */
            name: string;
            /**
             * Role
             * @enum {string}
             */
            role: "admin" | "operator" | "viewer";
            /**
             * Tenant
             * @description Set: the token sees and changes only this tenant (roles operator and viewer only).
             */
            tenant?: string | null;
        };
        /**
         * TwoLevel
         * @description Bandwidths of the two cache levels and the store behind them (bytes/s), and the SLA.
         */
        TwoLevel: {
            /**
             * Memory Bytes Per S
             * @description Reads served by the host's level.
             */
            memory_bytes_per_s: number;
            /**
             * Network Bytes Per S
             * @description Reads served by the server's level.
             */
            network_bytes_per_s: number;
            /**
             * Server Max Bytes
             * @description Most the server level may give the owner (a2).
             */
            server_max_bytes: number;
            /**
             * Sla Bytes Per S
             * @description Bandwidth to reach; null: the best the two levels' maxima allow, at the smallest total.
             */
            sla_bytes_per_s?: number | null;
            /**
             * Storage Bytes Per S
             * @description Reads served by the server's store.
             */
            storage_bytes_per_s: number;
        };
        /** TwoLevelOut */
        TwoLevelOut: {
            /** Tenants */
            tenants: components["schemas"]["TwoLevelTenantOut"][];
        };
        /** TwoLevelTenantOut */
        TwoLevelTenantOut: {
            /**
             * Alpha
             * @description Share of the tenant's cache in the host level (a1 / (a1 + a2)); null: no split in force.
             */
            alpha: number | null;
            /**
             * Host Bytes
             * @description a1, the host level (Moirai's hypervisor cache).
             */
            host_bytes: number | null;
            /** Levels */
            levels: components["schemas"]["LevelOut"][];
            /**
             * Predicted Bandwidth
             * @description The split's bandwidth (Eq. 5.7), bytes/s.
             */
            predicted_bandwidth: number | null;
            /**
             * Predicted Hit Ratio
             * @description U(a1 + a2) from the tenant's curve.
             */
            predicted_hit_ratio: number | null;
            /**
             * Server Bytes
             * @description a2, the storage server's level.
             */
            server_bytes: number | null;
            /** Tenant */
            tenant: string;
        };
        /** WhoAmI */
        WhoAmI: {
            /**
             * Actor
             * @description How the audit trail names this caller: bootstrap, anonymous or token:<name>.
             */
            actor: string;
            /**
             * Role
             * @enum {string}
             */
            role: "admin" | "operator" | "viewer";
            /**
             * Tenant
             * @description Set: this token sees and changes only this tenant.
             */
            tenant: string | null;
            /**
             * Write Refusal
             * @description Why this token may not change tenants, rules or policies, as a 403 would say it; null when it may (a tenant's own rules and policies, for a tenant-scoped operator).
             */
            write_refusal: string | null;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
