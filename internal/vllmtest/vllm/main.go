// Command vllm is the vLLM contract double as a program: the vllm program
// the local fleet starts (`vllm serve ...`, `vllm --version`), or the
// image's entrypoint for a test that runs a pod's containers as processes
// (kubetest.RunPod), given the container's arguments and environment. The cards
// it pretends to have come from MODELSERVE_VLLMTEST_CARDS and
// MODELSERVE_VLLMTEST_CARD_BYTES, which vllmtest.Entrypoint sets.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"modelserve/internal/vllmtest"
)

func main() {
	args := os.Args[1:]
	switch {
	case len(args) > 0 && args[0] == "--version":
		fmt.Println(vllmtest.Version)
		return
	case len(args) > 0 && args[0] == "serve":
		// `vllm serve ...`, as the vllm program is started; the image's
		// entrypoint is the server itself.
		args = args[1:]
	}
	cards, _ := strconv.Atoi(os.Getenv("MODELSERVE_VLLMTEST_CARDS"))
	cardBytes, _ := strconv.ParseInt(os.Getenv("MODELSERVE_VLLMTEST_CARD_BYTES"), 10, 64)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := vllmtest.Run(ctx, args, vllmtest.Options{Hardware: vllmtest.Hardware{Cards: cards, CardBytes: cardBytes},
		Env: os.Getenv, Log: os.Stdout})
	var exit *vllmtest.Exit
	switch {
	case err == nil, errors.Is(err, vllmtest.ErrStopped):
	case errors.As(err, &exit):
		fmt.Fprintln(os.Stderr, exit.Log)
		os.Exit(exit.Code)
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
