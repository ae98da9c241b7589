package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// apiError is an error answered with OpenAI's error body and a status.
type apiError struct {
	status  int
	kind    string // "type": invalid_request_error, authentication_error, ...
	code    string // "code": a machine-readable name, or ""
	param   string // the request field at fault, or ""
	message string
}

func (e *apiError) Error() string { return e.message }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, kind: "invalid_request_error", param: param, message: fmt.Sprintf(format, args...)}
}

// errorBody is OpenAI's {"error": {...}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	d := errorDetail{Message: e.message, Type: e.kind}
	if e.param != "" {
		d.Param = &e.param
	}
	if e.code != "" {
		d.Code = &e.code
	}
	return errorBody{d}
}

// stopList is OpenAI's "stop": a string or an array of strings.
type stopList []string

func (s *stopList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" { // as every other nullable field: not set
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("stop: want a string or an array of strings")
	}
	*s = many
	return nil
}

// samplingFields are the request fields chat and completions share.
type samplingFields struct {
	Model               string   `json:"model"`
	MaxTokens           *int     `json:"max_tokens"`
	MaxCompletionTokens *int     `json:"max_completion_tokens"`
	Temperature         *float64 `json:"temperature"`
	TopP                *float64 `json:"top_p"`
	TopK                *int     `json:"top_k"`
	Seed                *int64   `json:"seed"`
	Stop                stopList `json:"stop"`
	N                   *int     `json:"n"`
	Stream              bool     `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
		// Padding against length side channels: nothing to pad here.
		IncludeObfuscation json.RawMessage `json:"include_obfuscation"`
	} `json:"stream_options"`
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs json.RawMessage `json:"top_logprobs"`
	Echo        bool            `json:"echo"`
	Suffix      *string         `json:"suffix"`
	BestOf      *int            `json:"best_of"`
	Tools       json.RawMessage `json:"tools"`
	Functions   json.RawMessage `json:"functions"`

	// OpenAI's fields this server does not implement: accepted only at the
	// value that asks for nothing (check refuses any other). A field that is
	// not listed in samplingFields at all is refused by decodeJSON.
	ResponseFormat   json.RawMessage `json:"response_format"`
	LogitBias        json.RawMessage `json:"logit_bias"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	ToolChoice       json.RawMessage `json:"tool_choice"`
	FunctionCall     json.RawMessage `json:"function_call"`
	Modalities       json.RawMessage `json:"modalities"`
	Audio            json.RawMessage `json:"audio"`
	Prediction       json.RawMessage `json:"prediction"`
	WebSearchOptions json.RawMessage `json:"web_search_options"`
	ReasoningEffort  json.RawMessage `json:"reasoning_effort"`
	Verbosity        json.RawMessage `json:"verbosity"`

	// Fields that ask nothing of the answer: accepted and ignored.
	User              json.RawMessage `json:"user"`
	Metadata          json.RawMessage `json:"metadata"`
	Store             json.RawMessage `json:"store"`
	ServiceTier       json.RawMessage `json:"service_tier"`
	SafetyIdentifier  json.RawMessage `json:"safety_identifier"`
	PromptCacheKey    json.RawMessage `json:"prompt_cache_key"`
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls"`
}

// maxStops bounds "stop": each one is matched against the text as it grows.
const maxStops = 16

// check refuses what the server does not do, clearly, rather than ignoring
// it and answering something else than what was asked.
func (f *samplingFields) check() error {
	if f.N != nil && *f.N != 1 {
		return badRequest("n", "n: only 1 choice per request is supported (got %d)", *f.N)
	}
	if f.BestOf != nil && *f.BestOf != 1 {
		return badRequest("best_of", "best_of: only 1 is supported (got %d)", *f.BestOf)
	}
	if isSet(f.Logprobs) && string(f.Logprobs) != "false" && string(f.Logprobs) != "0" {
		return badRequest("logprobs", "logprobs are not supported")
	}
	if isSet(f.TopLogprobs) && string(f.TopLogprobs) != "0" {
		return badRequest("top_logprobs", "top_logprobs are not supported")
	}
	if f.Echo {
		return badRequest("echo", "echo is not supported")
	}
	if f.Suffix != nil && *f.Suffix != "" {
		return badRequest("suffix", "suffix is not supported")
	}
	if isSet(f.Tools) && string(f.Tools) != "[]" || isSet(f.Functions) && string(f.Functions) != "[]" {
		return badRequest("tools", "tools and functions are not supported")
	}
	if err := f.checkUnimplemented(); err != nil {
		return err
	}
	// OpenAI requires at least 1; leaving the field out means "until the
	// context is full".
	if f.MaxTokens != nil && *f.MaxTokens < 1 {
		return badRequest("max_tokens", "max_tokens: %d: want at least 1 (leave it out to generate until the context is full)", *f.MaxTokens)
	}
	if f.MaxCompletionTokens != nil && *f.MaxCompletionTokens < 1 {
		return badRequest("max_completion_tokens", "max_completion_tokens: %d: want at least 1 (leave it out to generate until the context is full)", *f.MaxCompletionTokens)
	}
	if t := f.Temperature; t != nil && !(*t >= 0 && *t <= 2) {
		return badRequest("temperature", "temperature: %v is outside [0, 2]", *t)
	}
	if p := f.TopP; p != nil && !(*p >= 0 && *p <= 1) {
		return badRequest("top_p", "top_p: %v is outside [0, 1]", *p)
	}
	if k := f.TopK; k != nil && *k < 0 {
		return badRequest("top_k", "top_k: %d is negative", *k)
	}
	if len(f.Stop) > maxStops {
		return badRequest("stop", "stop: %d strings, at most %d", len(f.Stop), maxStops)
	}
	for _, s := range f.Stop {
		if s == "" {
			return badRequest("stop", "stop: an empty string would stop before the first token")
		}
	}
	return nil
}

// checkUnimplemented refuses the fields this server does not implement
// unless they hold the value that asks for nothing (penalties of 0, a text
// response format, no logit bias, no tool choice, text output).
func (f *samplingFields) checkUnimplemented() error {
	unsupported := func(field, why string) error {
		return badRequest(field, "%s: %s is not supported by this server", field, why)
	}
	if isSet(f.ResponseFormat) {
		var rf struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(f.ResponseFormat, &rf) != nil || rf.Type != "text" {
			return unsupported("response_format", "a response format other than {\"type\": \"text\"} (structured output)")
		}
	}
	if isSet(f.LogitBias) {
		var bias map[string]json.RawMessage
		if json.Unmarshal(f.LogitBias, &bias) != nil || len(bias) > 0 {
			return unsupported("logit_bias", "logit bias")
		}
	}
	if p := f.PresencePenalty; p != nil && *p != 0 {
		return unsupported("presence_penalty", "a presence penalty other than 0")
	}
	if p := f.FrequencyPenalty; p != nil && *p != 0 {
		return unsupported("frequency_penalty", "a frequency penalty other than 0")
	}
	for _, c := range []struct {
		field string
		raw   json.RawMessage
	}{{"tool_choice", f.ToolChoice}, {"function_call", f.FunctionCall}} {
		if isSet(c.raw) && string(c.raw) != `"none"` && string(c.raw) != `"auto"` {
			return unsupported(c.field, "calling tools")
		}
	}
	if isSet(f.Modalities) {
		var m []string
		if json.Unmarshal(f.Modalities, &m) != nil || len(m) != 1 || m[0] != "text" {
			return unsupported("modalities", "output other than text")
		}
	}
	for _, c := range []struct {
		field, what string
		raw         json.RawMessage
	}{
		{"audio", "audio output", f.Audio},
		{"prediction", "a predicted output", f.Prediction},
		{"web_search_options", "web search", f.WebSearchOptions},
		{"reasoning_effort", "reasoning effort (the model is not a reasoning model)", f.ReasoningEffort},
		{"verbosity", "a verbosity setting", f.Verbosity},
	} {
		if isSet(c.raw) {
			return unsupported(c.field, c.what)
		}
	}
	return nil
}

// maxTokens is max_completion_tokens, else max_tokens, else 0 (until the
// context is full).
func (f *samplingFields) maxTokens() int {
	switch {
	case f.MaxCompletionTokens != nil:
		return *f.MaxCompletionTokens
	case f.MaxTokens != nil:
		return *f.MaxTokens
	}
	return 0
}

func (f *samplingFields) includeUsage() bool {
	return f.StreamOptions != nil && f.StreamOptions.IncludeUsage
}

func isSet(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// chatMessage is one message; content is a string, an array of parts, or
// null (an assistant message that only called tools, which we refuse).
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// A participant's name, which the templates have no place for.
	Name *string `json:"name"`
	// What an assistant message of a response holds besides its content,
	// sent back as is by clients that append the response's message to the
	// conversation: accepted when empty.
	Refusal      json.RawMessage `json:"refusal"`
	ToolCalls    json.RawMessage `json:"tool_calls"`
	FunctionCall json.RawMessage `json:"function_call"`
	Audio        json.RawMessage `json:"audio"`
	Annotations  json.RawMessage `json:"annotations"`
}

type chatRequest struct {
	samplingFields
	Messages []chatMessage `json:"messages"`
}

type completionRequest struct {
	samplingFields
	Prompt json.RawMessage `json:"prompt"`
}

// messages turns the request's messages into the template's: text parts
// joined, "developer" read as "system", and assistant replies trimmed as
// the CLI chat keeps them, so that a reply sent back in the next turn
// tokenizes as the cached tokens the model produced.
func (r *chatRequest) messages() ([]tokenizer.Message, error) {
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "messages: at least one message is required")
	}
	out := make([]tokenizer.Message, 0, len(r.Messages))
	for i, m := range r.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		role := m.Role
		switch role {
		case "developer":
			role = "system"
		case "system", "user", "assistant":
		default:
			return nil, badRequest(param+".role", "%s.role: %q is not supported (want system, developer, user or assistant)", param, m.Role)
		}
		if m.Name != nil && *m.Name != "" {
			return nil, badRequest(param+".name", "%s.name: participant names are not supported", param)
		}
		for _, c := range []struct {
			field string
			raw   json.RawMessage
		}{{"refusal", m.Refusal}, {"tool_calls", m.ToolCalls}, {"function_call", m.FunctionCall}, {"audio", m.Audio}} {
			if isSet(c.raw) && string(c.raw) != "[]" {
				return nil, badRequest(param+"."+c.field, "%s.%s: not supported", param, c.field)
			}
		}
		text, err := contentText(m.Content)
		if err != nil {
			return nil, badRequest(param+".content", "%s.content: %v", param, err)
		}
		if role == "assistant" {
			text = strings.TrimSpace(text)
		}
		out = append(out, tokenizer.Message{Role: role, Content: text})
	}
	return out, nil
}

// contentText reads a message's content: a string, or an array of
// {"type": "text", "text": ...} parts (joined).
func contentText(raw json.RawMessage) (string, error) {
	if !isSet(raw) {
		return "", errors.New("missing (null content, as of a tool call, is not supported)")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or an array of text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("a part of type %q: only text parts are supported", p.Type)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// promptText reads a completion prompt: a string, or an array holding one.
func (r *completionRequest) promptText() (string, error) {
	if !isSet(r.Prompt) {
		return "", badRequest("prompt", "prompt: required (a string)")
	}
	var s string
	if err := json.Unmarshal(r.Prompt, &s); err == nil {
		return s, nil
	}
	var many []string
	if err := json.Unmarshal(r.Prompt, &many); err == nil && len(many) == 1 {
		return many[0], nil
	}
	return "", badRequest("prompt", "prompt: want a string (or an array of one string; token arrays and batches are not supported)")
}

// decodeJSON reads a request body into v: one JSON object, no trailing
// data. A body over the limit is 413; anything else wrong is 400 naming
// the field and the type it wants.
func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	// A field the server does not know is refused as OpenAI refuses one,
	// rather than ignored, which would answer something else than what was
	// asked.
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return jsonError(err)
		}
		return badRequest("", "the body holds more than one JSON value")
	}
	return nil
}

func jsonError(err error) error {
	var tooLarge *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &tooLarge):
		return &apiError{status: http.StatusRequestEntityTooLarge, kind: "invalid_request_error", code: "request_too_large",
			message: fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit)}
	case errors.As(err, &typeErr):
		// Fields of the embedded samplingFields are named through it.
		field := strings.TrimPrefix(typeErr.Field, "samplingFields.")
		if field == "" {
			return badRequest("", "the body must be a JSON object, not %s", typeErr.Value)
		}
		return badRequest(field, "%s: want %s, got %s", field, jsonTypeName(typeErr.Type.String()), typeErr.Value)
	case errors.As(err, &syntax):
		return badRequest("", "malformed JSON at byte %d: %v", syntax.Offset, err)
	case errors.Is(err, io.EOF):
		return badRequest("", "the body is empty: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "malformed JSON: the body ends inside a value")
	}
	var apiErr *apiError
	if errors.As(err, &apiErr) {
		return apiErr
	}
	// A body read past the server's read timeout (a client sending slowly).
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return &apiError{status: http.StatusRequestTimeout, kind: "invalid_request_error", code: "request_timeout",
			message: "the request body did not arrive within the server's read timeout"}
	}
	// encoding/json has no type for this error; its text is
	// `json: unknown field "NAME"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if field, err := strconv.Unquote(name); err == nil {
			return badRequest(field, "%s: an unknown field (not supported by this server)", field)
		}
	}
	// An UnmarshalJSON of ours (stop) failing, or another decoding error.
	return badRequest("", "malformed request: %v", err)
}

// jsonTypeName names a Go type as the JSON it decodes from.
func jsonTypeName(goType string) string {
	switch {
	case strings.HasPrefix(goType, "*"):
		return jsonTypeName(goType[1:])
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	}
	return "an object"
}

// usage is OpenAI's token accounting; prompt_tokens_details.cached_tokens
// counts the prompt tokens found in the slot's cache (not run again).
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// extension is the "redrafter" object of a response: how the answer was
// decoded. The draft fields are there when ReDrafter ran.
type extension struct {
	Slot           int     `json:"slot"`
	PrefillSeconds float64 `json:"prefill_seconds"`
	DecodeSeconds  float64 `json:"decode_seconds"`
	TokensPerSec   float64 `json:"tokens_per_second"`
	// ReDrafter: verification passes, tokens per pass, accepted drafts per
	// pass over the drafts offered (L-1 per beam), and the beam shape.
	Steps          int     `json:"steps,omitempty"`
	TokensPerStep  float64 `json:"tokens_per_step,omitempty"`
	AcceptanceRate float64 `json:"acceptance_rate,omitempty"`
	BeamWidth      int     `json:"beam_width,omitempty"`
	BeamLength     int     `json:"beam_length,omitempty"`
}

type chatChoice struct {
	Index        int       `json:"index"`
	Message      *chatOut  `json:"message,omitempty"`
	Delta        *chatOut  `json:"delta,omitempty"`
	FinishReason *string   `json:"finish_reason"`
	Logprobs     *struct{} `json:"logprobs"`
}

type chatOut struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// chatResponse is both chat.completion and chat.completion.chunk.
type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             *usage       `json:"usage,omitempty"`
	Redrafter         *extension   `json:"redrafter,omitempty"`
}

type completionChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	FinishReason *string   `json:"finish_reason"`
	Logprobs     *struct{} `json:"logprobs"`
}

type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usage             `json:"usage,omitempty"`
	Redrafter         *extension         `json:"redrafter,omitempty"`
}

// finite keeps a float JSON can encode (a rate over zero time is 0).
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// encodeJSON is json.Marshal without HTML escaping (model text holds < and
// > often) and with the trailing newline.
func encodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
