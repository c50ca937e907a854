package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"

	"modelserve/catalog"
	"modelserve/internal/chat"
	"modelserve/views"
)

// playgroundSend sends the playground's form: a message to a chat model,
// or a text to an embedding model. From the page (htmx), a message's answer
// is the message and a reply that opens its own event stream; without
// JavaScript the reply is waited for and the page comes back with it.
func (s *Server) playgroundSend(w http.ResponseWriter, r *http.Request, v visit) {
	m, ok := s.playgroundModel(w, r, v)
	if !ok {
		return
	}
	p := s.playgroundView(r, v, m)
	if m.Capabilities.Embeddings {
		s.playgroundEmbed(w, r, p, m)
		return
	}
	in, history := readChat(r, m, &p.Form)
	p.Turns = history
	if !in.ok {
		if isFragment(r) {
			// The form again with its errors, in place of the form.
			w.Header().Set("HX-Retarget", "#playground-form")
			w.Header().Set("HX-Reswap", "outerHTML")
			s.render(w, r, http.StatusOK, views.ChatForm(p.Form, false))
			return
		}
		s.render(w, r, http.StatusOK, views.PlaygroundPageView(p))
		return
	}
	body := in.body(m.Name)
	user := views.Turn{Role: "user", Text: in.message}
	next := p.Form
	next.Message = ""

	if isFragment(r) {
		id, ok := s.asks.put(pendingAsk{user: v.user, model: m.Name, body: body})
		if !ok {
			w.Header().Set("HX-Retarget", "#playground-form")
			w.Header().Set("HX-Reswap", "outerHTML")
			p.Form.Error = "too many replies are waiting to start: wait for those under way, then send again"
			s.render(w, r, http.StatusOK, views.ChatForm(p.Form, false))
			return
		}
		wait := s.waitFor(m.Name)
		s.render(w, r, http.StatusOK, views.PlaygroundSentView(views.PlaygroundSent{
			User: user, Stream: playgroundURL(m.Name) + "/stream?ask=" + url.QueryEscape(id), Form: next,
			Loading: wait.loading, Room: wait.room,
		}))
		return
	}

	meter := newReplyMeter(time.Now())
	err := s.deps.Gateway.AskStream(r.Context(), chat.CompletionsPath, body, meter.feed)
	if r.Context().Err() != nil {
		return // the browser went away; nobody reads the answer
	}
	reply := meter.reply(true, s.replyError(r, m.Name, err))
	p.Turns = append(p.Turns, user, views.Turn{Role: "assistant", Reply: reply})
	p.Status = replyStatus(reply)
	p.Form = next
	p.State = s.playgroundState(m)
	s.render(w, r, http.StatusOK, views.PlaygroundPageView(p))
}

// chatInput is the playground's form, read.
type chatInput struct {
	ok          bool
	message     string
	system      string
	maxTokens   int
	temperature *float64
	// history is the conversation before the message, as the engine
	// reads it.
	history []chat.Message
}

// readChat reads the form into in and f (what to show again), and the
// conversation so far as the page showed it.
func readChat(r *http.Request, m catalog.Model, f *views.PlaygroundForm) (in chatInput, turns []views.Turn) {
	f.Message = r.PostFormValue("message")
	f.System = r.PostFormValue("system")
	f.MaxTokens = strings.TrimSpace(r.PostFormValue("max_tokens"))
	f.Temperature = strings.TrimSpace(r.PostFormValue("temperature"))
	in.ok = true
	in.message = strings.TrimSpace(f.Message)
	in.system = strings.TrimSpace(f.System)
	if in.message == "" {
		f.MessageError, in.ok = "type a message to send", false
	}
	limit := maxTokensLimit(m)
	in.maxTokens = min(defaultMaxTokens, limit)
	if f.MaxTokens != "" {
		n, err := strconv.Atoi(f.MaxTokens)
		if err != nil || n < 1 || n > limit {
			f.MaxTokensError, in.ok = fmt.Sprintf("max tokens is a whole number from 1 to %d, the longest reply the model may give", limit), false
		}
		in.maxTokens = n
	}
	if f.Temperature != "" {
		t, err := strconv.ParseFloat(f.Temperature, 64)
		if err != nil || t < 0 || t > 2 {
			f.TemperatureError, in.ok = "temperature is a number from 0 (the likeliest tokens) to 2", false
		}
		in.temperature = &t
	}

	roles, texts := r.PostForm["turn_role"], r.PostForm["turn_text"]
	if len(roles) != len(texts) {
		f.Error, in.ok = "the conversation on the page is not whole: reload the page to start again", false
		return in, nil
	}
	for i, role := range roles {
		if role != "user" && role != "assistant" {
			f.Error, in.ok = "the conversation on the page is not whole: reload the page to start again", false
			return in, nil
		}
		// A message whose reply failed is followed by another message:
		// the later stands for both, as chat templates want turns to
		// alternate.
		if n := len(in.history); role == "user" && n > 0 && in.history[n-1].Role == "user" {
			in.history, turns = in.history[:n-1], turns[:n-1]
		}
		in.history = append(in.history, chat.Message{Role: role, Content: texts[i]})
		t := views.Turn{Role: role, Text: texts[i]}
		if role == "assistant" {
			t.Reply = views.Reply{Text: texts[i], Done: true}
		}
		turns = append(turns, t)
	}
	return in, turns
}

// body is the chat request for model: streamed, with the usage at its end
// for the reply's tokens per second.
func (in chatInput) body(model string) []byte {
	var msgs []chat.Message
	if in.system != "" {
		msgs = append(msgs, chat.System(in.system))
	}
	msgs = append(msgs, in.history...)
	if n := len(msgs); n > 0 && msgs[n-1].Role == "user" {
		msgs = msgs[:n-1] // its reply failed; this message stands for it
	}
	msgs = append(msgs, chat.User(in.message))
	return chat.Request{
		Model: model, Messages: msgs, MaxTokens: in.maxTokens, Temperature: in.temperature,
		Stream: true, StreamOptions: &chat.StreamOptions{IncludeUsage: true},
	}.Body()
}

// playgroundEmbed embeds the form's text and shows the vector's length and
// first values.
func (s *Server) playgroundEmbed(w http.ResponseWriter, r *http.Request, p views.PlaygroundPage, m catalog.Model) {
	text := r.PostFormValue("message")
	p.Form.Message = text
	var res views.Embedding
	if strings.TrimSpace(text) == "" {
		res.Error = "type a text to embed"
	} else {
		body := chat.Embed(m.Name, text).Body()
		start := time.Now()
		var out chat.Embeddings
		err := s.deps.Gateway.AskStream(r.Context(), chat.EmbeddingsPath, body, func(b []byte) error {
			return json.Unmarshal(b, &out)
		})
		if r.Context().Err() != nil {
			return
		}
		switch {
		case err != nil:
			res.Error = s.replyError(r, m.Name, err)
		case len(out.Data) == 0 || len(out.Data[0].Embedding) == 0:
			res.Error = m.Name + " answered no vector: the fleet page shows its replica's log"
		default:
			vec := out.Data[0].Embedding
			res.Dimensions, res.Took = len(vec), latencyText(time.Since(start))
			for _, x := range vec[:min(len(vec), 8)] {
				res.First = append(res.First, strconv.FormatFloat(x, 'f', 4, 64))
			}
		}
	}
	// The text may have loaded the model: the heading says how it fares
	// now, not before.
	p.State = s.playgroundState(m)
	if isFragment(r) {
		s.render(w, r, http.StatusOK, templ.Join(views.EmbeddingView(res), views.PlaygroundStateView(p.State, true)))
		return
	}
	p.Embedding = &res
	s.render(w, r, http.StatusOK, views.PlaygroundPageView(p))
}
