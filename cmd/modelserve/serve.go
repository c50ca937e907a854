package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"modelserve/handlers"
	"modelserve/internal/store"
)

// serve runs the server until ctx ends. ready, when not nil, is told the
// address it listens on (tests listen on port 0).
func serve(ctx context.Context, cfg config, log *slog.Logger, ready func(addr string)) error {
	if err := os.MkdirAll(cfg.Data, 0o755); err != nil {
		return fmt.Errorf("cannot create the data directory %s: %w", cfg.Data, err)
	}
	db, err := store.Open(ctx, filepath.Join(cfg.Data, "modelserve.db"))
	if err != nil {
		return err
	}
	defer db.Close()

	h, err := handlers.New(handlers.Deps{DB: db, Log: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", cfg.Addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: event streams and mirror downloads are long.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("modelserve listening", "addr", ln.Addr().String(), "data", cfg.Data)
	if ready != nil {
		ready(ln.Addr().String())
	}

	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()

	select {
	case err = <-errc:
	case <-ctx.Done():
		log.Info("shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.Shutdown(sctx)
		cancel()
	}
	wg.Wait()
	log.Info("stopped")
	return err
}
