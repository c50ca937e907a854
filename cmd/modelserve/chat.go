package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"modelserve/internal/chat"
	"modelserve/internal/operr"
)

const chatUsage = `Usage: modelserve chat [--system TEXT] [--max-tokens N] MODEL [MESSAGE...]

Talks with a served model through the gateway (/v1/chat/completions), the
reply printed as it streams. With a message, sends it and prints the one reply;
without, reads a message a line from standard input and keeps the conversation
until the input ends (Ctrl-D). The server is --url or MODELSERVE_URL, the token
--token or MODELSERVE_TOKEN.
`

// Bounds on a conversation the client keeps: a message typed, and how many
// turns go back with each (the oldest are left out first; the system
// prompt stays).
const (
	maxChatMessage = 1 << 20
	maxChatTurns   = 64
)

// chatCmd runs `modelserve chat MODEL`, the way `ollama run` feels.
func chatCmd(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	var system string
	var maxTokens int
	fs, c, err := clientFlags("modelserve chat", args, getenv, stderr, chatUsage, func(fs *flag.FlagSet) {
		fs.StringVar(&system, "system", "", "a system prompt for the conversation")
		fs.IntVar(&maxTokens, "max-tokens", 0, "most tokens in a reply; 0: the model's own limit")
	})
	if err != nil {
		return err
	}
	if fs.NArg() < 1 {
		return usageError{errors.New("chat takes a model: modelserve chat MODEL [MESSAGE], and modelserve model list shows them")}
	}
	if maxTokens < 0 || maxTokens > 1<<20 {
		return usageError{fmt.Errorf("--max-tokens is 0 or more, up to %d", 1<<20)}
	}
	model := fs.Arg(0)
	var head []chat.Message
	if system != "" {
		head = append(head, chat.System(system))
	}
	var turns []chat.Message
	say := func(text string) error {
		turns = append(turns, chat.User(text))
		if len(turns) > maxChatTurns {
			turns = turns[len(turns)-maxChatTurns:]
		}
		req := chat.Request{Model: model, Messages: append(append([]chat.Message{}, head...), turns...), MaxTokens: maxTokens, Stream: true}
		reply, err := streamReply(ctx, c, req, stdout)
		if err != nil {
			turns = turns[:len(turns)-1]
			return err
		}
		turns = append(turns, chat.Message{Role: "assistant", Content: reply})
		return nil
	}
	if fs.NArg() > 1 {
		return say(strings.Join(fs.Args()[1:], " "))
	}

	term := isTerminal(stdin)
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 0, 64<<10), maxChatMessage)
	for {
		if term {
			fmt.Fprint(stderr, ">>> ")
		}
		if !sc.Scan() {
			break
		}
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		if err := say(text); err != nil {
			if ctx.Err() != nil || !term {
				return err
			}
			// At a terminal a refusal is said and the conversation goes on.
			fmt.Fprintln(stderr, "modelserve:", err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read a message from standard input: %w (a message is at most %d bytes)", err, maxChatMessage)
	}
	return ctx.Err()
}

// streamReply sends req and prints the reply's text as it streams, then a
// line's end; it returns the whole reply.
func streamReply(ctx context.Context, c *client, req chat.Request, stdout io.Writer) (string, error) {
	resp, err := c.send(ctx, "POST", chat.CompletionsPath, req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var reply strings.Builder
	done := false
	err = readSSE(resp.Body, func(_ string, data []byte) error {
		if string(data) == "[DONE]" {
			done = true
			return nil
		}
		ch, ok := chat.ReadCompletion(data)
		if !ok {
			if msg := streamError(data); msg != "" {
				return errors.New(msg)
			}
			return nil // a usage-only chunk has no choices
		}
		text := ch.Text()
		if reply.Len()+len(text) > maxAnswer {
			return fmt.Errorf("the reply of %s is longer than %d bytes", operr.Quote(req.Model), maxAnswer)
		}
		reply.WriteString(text)
		_, err := io.WriteString(stdout, text)
		return err
	})
	fmt.Fprintln(stdout)
	if err != nil {
		return reply.String(), err
	}
	if !done && ctx.Err() == nil {
		return reply.String(), fmt.Errorf("the reply of %s broke off before its end", operr.Quote(req.Model))
	}
	return reply.String(), ctx.Err()
}

// streamError is the sentence of an error sent inside a stream, as the
// gateway and engines do once a reply has begun; "" when data is none.
func streamError(data []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil {
		return ""
	}
	return e.Error.Message
}
