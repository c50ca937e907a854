package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"modelserve/catalog"
	"modelserve/handlers"
	"modelserve/internal/auth"
	"modelserve/internal/engine"
	"modelserve/internal/evals"
	"modelserve/internal/gateway"
	"modelserve/internal/gguf"
	"modelserve/internal/hf"
	"modelserve/internal/metrics"
	"modelserve/internal/mirror"
	"modelserve/internal/notify"
	"modelserve/internal/plan"
	"modelserve/internal/rollup"
	"modelserve/internal/store"
	"modelserve/internal/trace"
	"modelserve/internal/updates"
	"modelserve/jobs"
)

// serve runs the server until ctx ends. ready, when not nil, is told the
// address it listens on (tests listen on port 0).
func serve(ctx context.Context, cfg config, log *slog.Logger, ready func(addr string)) error {
	db, err := openData(ctx, cfg.Data)
	if err != nil {
		return err
	}
	defer db.Close()

	if pw, created, err := auth.EnsureAdmin(ctx, db); err != nil {
		return err
	} else if created {
		log.Info("created the first console user; its password is shown only this once", "user", "admin", "password", pw)
	}
	// How the console is reached and its cookies kept (web.go): a bad
	// setting stops the start here.
	site, err := webSettings(cfg)
	if err != nil {
		return err
	}

	// The registries: the Hub, and a folder of local repositories.
	// Profiles an older release stored are read once more and written in
	// today's fields, before anything reads the catalog.
	if err := catalog.Upgrade(ctx, db); err != nil {
		return fmt.Errorf("upgrading the catalog's profiles: %w", err)
	}
	// How long writes wait for the database's write lock, behind
	// modelserve's other writers (on /metrics, below).
	writeWaits := store.WaitCollector(db)
	store := catalog.NewStore(db)
	met := metrics.New(func(ctx context.Context) (int, error) {
		ms, err := store.List(ctx)
		return len(ms), err
	})
	met.Registerer().MustRegister(writeWaits)
	// Traces go to the collector the OTEL_* variables name, or nowhere.
	// At a stop, what is queued is sent within a few seconds, or dropped.
	tracing, err := trace.FromEnv(cfg.OTel, trace.Options{Registerer: met.Registerer()})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			log.Warn("traces still queued at the stop were dropped", "endpoint", tracing.Endpoint, "err", err)
		}
	}()
	if tracing.On() {
		log.Info("tracing", "endpoint", tracing.Endpoint)
	}

	// The registries: the Hub, and a folder of local repositories. With
	// tracing on, each request to the Hub is a client span of the job
	// step that asked.
	hubHTTP := (*http.Client)(nil)
	if tracing.On() {
		hubHTTP = &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport,
			otelhttp.WithTracerProvider(tracing.Provider), otelhttp.WithPropagators(tracing.Propagator))}
	}
	hub, err := hf.NewClient(hf.Options{Endpoint: cfg.HFEndpoint, Token: cfg.HFToken, Offline: cfg.HFOffline, HTTP: hubHTTP})
	if err != nil {
		return err
	}
	regs := hf.Registries{Hub: hub}
	if cfg.HFOffline {
		log.Info("HF_HUB_OFFLINE is set: nothing is asked of the Hub; the mirror and --models-dir serve", "hub", cfg.HFEndpoint)
	}
	if cfg.ModelsDir != "" {
		regs.Local = hf.NewLocal(cfg.ModelsDir, filepath.Join(cfg.Data, "local-registry-hashes.json"))
	}

	// The fleet runs what the catalog asks for. Everything that changes
	// the catalog goes through cat, which tells the fleet at once.
	enginePath, version, vllm := "", engine.ImageVersion(cfg.EngineImage), ""
	if cfg.Fleet == "kubernetes" {
		// The cluster's pods run the image, not an engine of this
		// machine's: its tag says the build the check step holds models to.
		log.Info("the cluster's pods run the engine image", "image", cfg.EngineImage, "build", version.String())
		// Only the cluster runs vLLM, from its image.
		vllm = cfg.VLLMImage
	} else {
		enginePath, version = findEngine(ctx, cfg.LlamaServer, log)
		vllm = findVLLM(ctx, cfg.VLLM, log)
	}
	// Notices of what modelserve did on its own go to --notify-url, from a
	// queue of their own: a webhook that is slow or down holds up nothing.
	var notifier *notify.Notifier
	if cfg.NotifyURL != "" {
		if notifier, err = notify.New(cfg.NotifyURL, met.Registerer(), notify.Options{Log: log.With("part", "notify")}); err != nil {
			return err
		}
	}
	fl, cat, err := newBackend(ctx, cfg, enginePath, store, db, notifier, log)
	if err != nil {
		return err
	}
	met.WatchFleet(fl)
	mir, err := mirror.New(mirror.Options{Dir: filepath.Join(cfg.Data, "mirror"), Registry: regs, Metrics: met,
		HFCache: cfg.HFHubCache, DownloadRate: cfg.DownloadRate, Log: log})
	if err != nil {
		return err
	}

	// The hardware a plan is made for is the fleet's nodes, with what each
	// has free after what its replicas were promised: the page's "fits"
	// and the job's placement are decided on the same figures.
	planner, err := plan.New(plan.Config{Pool: fl.Pool, Headers: plan.ReadHeaders(regs), Configs: plan.ReadConfigs(regs),
		DownloadURL: regs.DownloadURL, Log: log})
	if err != nil {
		return err
	}

	known := gguf.KnownArchitectures()
	for _, a := range strings.Split(cfg.Architectures, ",") {
		if a = strings.TrimSpace(a); a != "" {
			known.Add(a)
		}
	}
	// The gateway sends OpenAI clients' requests to the replicas by model
	// name (and the job's smoke test through the same path). It runs nothing in the background; Close lets go of the
	// connections it keeps to the engines.
	toks := auth.NewTokens(db)
	gwOpts := gateway.Options{
		Catalog: store, Fleet: fl, Tokens: toks, Metrics: met.Registerer(), Log: log.With("part", "gateway"),
	}
	if tracing.On() {
		gwOpts.Tracer, gwOpts.Propagator = tracing.HotTracer("modelserve/gateway"), tracing.Propagator
		gwOpts.TraceContent = cfg.TraceContent
	}
	gw, err := gateway.New(gwOpts)
	if err != nil {
		return err
	}
	defer gw.Close()
	// A catalog change reaches /v1/models and the routing at once.
	cat.OnChange(gw.Refresh)
	// A token revoked from the console is refused by the gateway's next
	// request with it, not at the end of the while it keeps tokens.
	toks.OnRevoke(gw.ForgetTokens)

	// The watcher for new weights checks the catalog's models served from
	// a branch, each on its interval, in the background: it never holds
	// the start, and a registry that fails is a model's check result.
	watcher, err := updates.New(updates.Deps{DB: db, Catalog: store, Registry: regs, Metrics: met, Notify: notifier,
		Interval: cfg.UpdateInterval, Log: log.With("part", "updates")})
	if err != nil {
		return err
	}

	// Eval suites run through the gateway, as a client's requests go. A
	// run a stop left running is failed before anything else can look
	// at it.
	runner, err := evals.New(evals.Deps{DB: db, Catalog: store, Asker: gw, Metrics: met, Log: log.With("part", "evals")})
	if err != nil {
		return err
	}
	if _, err := runner.FailInterrupted(ctx); err != nil {
		return err
	}

	// Jobs serve models, and their updates beside them as canaries judged
	// on the gateway's measures of each version.
	share := cmp.Or(cfg.CanaryShare, jobs.DefaultShare)
	js, err := jobs.New(jobs.Deps{
		DB: db, Registry: regs, Mirror: mir, Catalog: cat, Planner: planner, Fleet: fl, Gateway: gw,
		EngineBuild: version.Build, Architectures: known, VLLM: vllm, Pool: fl.Pool,
		Log: log, Metrics: met, Notify: notifier, Tracer: tracing.Tracer("modelserve/jobs"), TraceContent: cfg.TraceContent,
		Updates: watcher, Versions: store, Share: share, Policy: cfg.CanaryPolicy, Meters: gatewayMeters{gw}, Evals: jobsEvals{runner},
		Starts: fl,
	})
	if err != nil {
		return err
	}

	// A model whose update policy is auto has each update noticed tried
	// at once, as an operator's Try would.
	watcher.OnAuto(func(ctx context.Context, u updates.Update) error {
		_, err := js.Update(ctx, jobs.UpdateRequest{Model: u.Model, UpdateID: u.ID, By: "its auto update policy"})
		return err
	})

	// Each minute of the models' requests and the nodes' memory is kept
	// for the console's charts of the last hour.
	rollups, err := rollup.New(ctx, rollup.Deps{DB: db, Catalog: store, Gateway: rollup.GatewayOf(gw), Fleet: fl, Log: log.With("part", "rollup")})
	if err != nil {
		return err
	}
	cat.OnChange(rollups.Changed)

	// The fleet's loop and the watcher's live until serve returns; the
	// replicas stop with it, and the next start begins them afresh.
	var wg sync.WaitGroup
	wctx, stopWatcher := context.WithCancel(context.Background())
	nctx, stopNotifier := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	// The fleet runs until modelserve stops, or until a handover ends it
	// first (handover.go): then its engines, which outlive it, are left
	// to the next process to adopt, and its last view of them answers the
	// gateway meanwhile. A handover that fails runs it again, and it takes
	// its engines back as the next process would have.
	fleets := &fleetRun{fl: fl, log: log, ran: ran}
	fleets.start()
	wg.Add(3)
	go func() {
		defer wg.Done()
		if notifier != nil {
			notifier.Run(nctx)
		}
	}()
	go func() {
		defer wg.Done()
		watcher.Run(wctx)
	}()
	go func() {
		defer wg.Done()
		rollups.Run(wctx)
	}()
	defer func() {
		// The eval runs, the watcher and the jobs first (they ask the
		// replicas, read the catalog and watch the fleet), then the
		// replicas. The database closes after all (deferred first, so run
		// last).
		runner.Close()
		stopWatcher()
		js.Close()
		fleets.stop()
		stopNotifier()
		wg.Wait()
	}()
	// A fleet on a cluster knows the nodes once its caches hold them;
	// until then the pool is empty and every plan would fit nowhere. So
	// modelserve listens once it has them, or says why it cannot (Run
	// gives up within a minute).
	if c, ok := fl.(interface{ Synced() <-chan struct{} }); ok {
		select {
		case <-c.Synced():
		case err := <-ran:
			if err == nil {
				err = errors.New("the fleet stopped before it had read the cluster")
			}
			return err
		case <-ctx.Done():
			return nil
		}
	}
	if err := js.Resume(ctx); err != nil {
		return err
	}

	// Closed as the server stops or hands its port over: the console's
	// event streams end, and their browsers reconnect to whoever listens.
	stopping := make(chan struct{})
	h, err := handlers.New(handlers.Deps{
		DB: db, Jobs: js, Catalog: cat, Mirror: mir, Metrics: met.Handler(), MetricsToken: cfg.MetricsToken, Log: log,
		Registry: regs, Finder: regs, Updates: watcher, Versions: store, CanaryShare: share, Evals: runner, Planner: planner, Pool: poolOf(fl.Pool), Fleet: fl, Gateway: gw,
		SessionKeys: site.keys, Secure: site.secure, TrustedProxies: site.trusted, PublicURL: cfg.PublicURL, DataDir: absDir(cfg.Data),
		TraceURL: cfg.TraceURL, Tokens: toks, Rollups: rollups, Stopping: stopping,
	})
	if err != nil {
		return err
	}
	// The socket is the previous process's when it handed it over, or
	// systemd's (handover.go): either way, no client is refused while one
	// modelserve follows another.
	ln, how, err := listen(cfg.Addr)
	if err != nil {
		return err
	}
	var handingOver atomic.Bool
	srv := &http.Server{
		Handler:           closeAfter(h, &handingOver),
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: event streams and mirror downloads are long.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Closing the jobs ends every event stream, which would otherwise hold
	// Shutdown for its whole grace: a stream is never idle.
	srv.RegisterOnShutdown(js.Close)
	log.Info("modelserve listening", "addr", ln.Addr().String(), "socket", how, "scheme", site.scheme(), "session_keys", site.keySource, "data", cfg.Data, "engine", enginePath, "engine_build", version.String())
	if ready != nil {
		ready(ln.Addr().String())
	}

	errc := make(chan error, 1)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := site.serve(srv, ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	if handedOver() {
		// The old process stops taking requests once this one says it is
		// ready: by then, this one answers them at once.
		awaitFleet(ctx, fl, log)
	}
	if err := writePIDFile(cfg.Data); err != nil {
		log.Warn("could not write the pid file: modelserve serve --upgrade will not find this process; SIGHUP works", "err", err)
	}
	defer removePIDFile(cfg.Data)
	sayReady(log)

	ho := handover{ln: ln, data: cfg.Data, jobs: js, fleet: fleets, gateway: gw, evals: runner, log: log}
	grace := 10 * time.Second
	for err == nil {
		select {
		case err = <-errc:
		case <-ctx.Done():
			log.Info("shutting down")
			err = errStopped
		case <-cfg.HandOver:
			pid, herr := ho.run(ctx)
			if herr != nil {
				log.Error("the new modelserve did not take over; this one serves on", "why", herr)
				writeResult(cfg.Data, "failed: the new modelserve did not take over, and the old one serves on: "+herr.Error())
				continue
			}
			writeResult(cfg.Data, fmt.Sprintf("the new modelserve (pid %d) serves; the old one (pid %d) finishes what it answers and exits", pid, os.Getpid()))
			// What it answers may take as long as a replica's drain.
			grace, err = cfg.DrainTimeout, errStopped
			ho.release(&handingOver, stopping)
		}
	}
	if errors.Is(err, errStopped) {
		if !handingOver.Load() {
			close(stopping)
		}
		sctx, cancel := context.WithTimeout(context.Background(), max(grace, 10*time.Second))
		// Requests in flight, the gateway's queued ones among them, end
		// by themselves; what is left when the grace is over is cut.
		if err = srv.Shutdown(sctx); errors.Is(err, context.DeadlineExceeded) {
			log.Warn("requests were still being answered when the grace ended; they are cut", "grace", grace)
			err = srv.Close()
		}
		cancel()
	}
	<-served
	log.Info("stopped")
	return err
}

// fleetRun runs the fleet in the background: start begins a Run, stop
// ends it and waits for it to return.
type fleetRun struct {
	fl  fleetBackend
	log *slog.Logger
	// ran is told how the first Run ended, if it ends by itself.
	ran    chan error
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *fleetRun) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r.mu.Lock()
	r.cancel, r.done = cancel, done
	r.mu.Unlock()
	go func() {
		defer close(done)
		err := r.fl.Run(ctx)
		if err != nil {
			r.log.Error("the fleet stopped", "err", err)
		}
		select {
		case r.ran <- err:
		default:
		}
	}()
}

func (r *fleetRun) stop() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// outlives is whether the fleet's engines keep running when its Run
// ends, for the next process to adopt.
func (r *fleetRun) outlives() bool {
	o, ok := r.fl.(interface{ EnginesOutlive() bool })
	return ok && o.EnginesOutlive()
}

// errStopped is serve's loop told to stop: by its context or a handover.
var errStopped = errors.New("stopped")

// findEngine is the llama-server modelserve starts and the build it
// reports, which decides what the check step accepts. A missing engine is
// not fatal here: the catalog and the mirror work without one, and
// placement says what to install.
func findEngine(ctx context.Context, configured string, log *slog.Logger) (string, engine.Version) {
	path, source, err := engine.Find(configured)
	if err != nil {
		log.Warn("no llama-server: models are mirrored and catalogued, but no replica starts", "why", err)
		return "", engine.Version{}
	}
	v, err := engine.ReadVersion(ctx, path)
	if err != nil {
		log.Warn("could not read the engine's version; the check step accepts any architecture it knows", "engine", path, "err", err)
		return path, engine.Version{}
	}
	if source == engine.Cached {
		log.Info("using the installed llama-server: none is configured and none is on PATH", "engine", path, "build", v.String(), "version", v.Text)
	}
	return path, v
}

// findVLLM is the vLLM release of the vllm program the local fleet would
// start (--vllm, else vllm on PATH), as `vllm --version` prints it: what
// the check step holds models of original weights to. "" when there is
// none, and a serve of original weights then ends at its plan step.
func findVLLM(ctx context.Context, configured string, log *slog.Logger) string {
	path, err := exec.LookPath(cmp.Or(configured, "vllm"))
	if err != nil {
		if configured != "" {
			log.Warn("no vllm: original weights are not served", "vllm", configured, "why", err)
		}
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	release := strings.TrimSpace(lines[len(lines)-1])
	if _, ok := plan.ParseVLLMVersion(release); err != nil || !ok {
		log.Warn("could not read vllm's release; original weights are held to the model classes any vLLM runs", "vllm", path, "err", err)
		return "unknown"
	}
	log.Info("original weights run on this machine's vLLM", "vllm", path, "release", release)
	return release
}
