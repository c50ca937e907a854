package handlers

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"modelserve/internal/evals"
	"modelserve/internal/operr"
	"modelserve/views"
)

// evalsAddCase adds one case, from the add-case form, to the end of the
// model's kept suite, and goes back to the page. The suite's owner checks
// it as it checks a suite typed whole: a case refused comes back in the
// form with the sentence why and what was typed (200, so htmx swaps it
// in), and nothing is changed.
func (s *Server) evalsAddCase(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	f := readAddCase(r)
	p, st, err := s.loadEvals(r.Context(), v, name)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	refuse := func(msg string) {
		f.Action, f.CSRF, f.Embeddings, f.Error = p.AddCase.Action, p.AddCase.CSRF, p.AddCase.Embeddings, msg
		p.AddCase = f
		s.render(w, r, http.StatusOK, views.EvalsPageView(p))
	}
	c, msg := addCase(f).caseJSON()
	if msg != "" {
		refuse(msg)
		return
	}
	var kept struct {
		Cases []json.RawMessage `json:"cases"`
	}
	if len(st.Suite.Cases) > 0 {
		if err := json.Unmarshal(st.SuiteJSON(), &kept); err != nil {
			s.pageError(w, r, v, err)
			return
		}
	}
	kept.Cases = append(kept.Cases, c)
	suite, _ := json.Marshal(kept)
	saved, err := s.deps.Evals.SetSuite(r.Context(), name, suite, v.user)
	if e, ok := operr.As(err); ok && e.Kind == operr.Invalid {
		refuse(e.Msg)
		return
	}
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("eval case added from the console", "model", name, "case", f.Name, "cases", len(saved.Suite.Cases), "user", v.user)
	http.Redirect(w, r, evalsURL(name)+"?saved=1", http.StatusSeeOther)
}

// addCase is the add-case form as sent.
type addCase views.AddCaseForm

func readAddCase(r *http.Request) views.AddCaseForm {
	get := func(k string) string { return r.PostFormValue(k) }
	return views.AddCaseForm{
		Name: strings.TrimSpace(get("case_name")), Kind: get("kind"), System: get("system"), Prompt: get("prompt"),
		MaxTokens: strings.TrimSpace(get("max_tokens")), Expect: get("expect"), IgnoreCase: get("ignore_case") != "",
		Anchor: get("anchor"), Closer: get("closer"), Farther: get("farther"),
	}
}

// caseJSON is the form's case in the suite's format, or a sentence saying
// what of the form is not a case. What the format itself requires (names,
// lengths, patterns, schemas) is the suite's owner's to say.
func (f addCase) caseJSON() (json.RawMessage, string) {
	c := map[string]any{"name": f.Name}
	expect := map[string]any{}
	switch f.Kind {
	case evals.KindRegex, evals.KindExact:
		expect[f.Kind] = f.Expect
		if f.Kind == evals.KindExact && f.IgnoreCase {
			expect["ignore_case"] = true
		}
	case evals.KindJSONSchema:
		if !json.Valid([]byte(f.Expect)) {
			return nil, "the expected answer's schema is not JSON: write it as a JSON object, such as {\"type\": \"object\"}"
		}
		expect[f.Kind] = json.RawMessage(f.Expect)
	case evals.KindSimilarity:
		expect[f.Kind] = map[string]string{"anchor": f.Anchor, "closer": f.Closer, "farther": f.Farther}
	default:
		return nil, "choose what the answer is held to: a pattern, an exact text or a JSON schema (a similarity for an embedding model)"
	}
	c["expect"] = expect
	if f.Kind != evals.KindSimilarity {
		c["prompt"] = f.Prompt
		if strings.TrimSpace(f.System) != "" {
			c["system"] = f.System
		}
		if f.MaxTokens != "" {
			n, err := strconv.Atoi(f.MaxTokens)
			if err != nil {
				return nil, "max tokens is a whole number, such as 64"
			}
			c["max_tokens"] = n
		}
	}
	b, _ := json.Marshal(c) // strings, a number and JSON checked valid
	return b, ""
}
