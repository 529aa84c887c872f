package admin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestManagementErrorAdvice: a refusal by the management API names the user and what to do,
// and never the password.
func TestManagementErrorAdvice(t *testing.T) {
	tests := []struct {
		status int
		want   string
	}{
		{http.StatusUnauthorized, `has a management tag`},
		{http.StatusForbidden, `lacks permissions on vhost "orders"`},
		{http.StatusNotFound, `vhost "orders" or the object does not exist`},
		{http.StatusInternalServerError, `500 Internal Server Error`},
	}
	for _, tt := range tests {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tt.status)
			_, _ = w.Write([]byte(`{"error":"refused"}`))
		}))
		m, err := NewManagement(strings.Replace(srv.URL, "http://", "http://ops:s3cret@", 1), "orders")
		if err != nil {
			t.Fatalf("NewManagement: %v", err)
		}
		_, err = m.Queues(context.Background())
		srv.Close()
		if !errors.Is(err, ErrManagement) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("status %d: err = %v, want ErrManagement saying %q", tt.status, err, tt.want)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("status %d: the error shows the password: %v", tt.status, err)
		}
		if tt.status == http.StatusUnauthorized && !strings.Contains(err.Error(), `user "ops"`) {
			t.Errorf("401: the error does not name the user: %v", err)
		}
	}
}

// TestUnplannedOf: only names of the plan's naming rule that the plan lacks are listed; an
// application's object under the prefix, another topology's and the plan's own are not.
func TestUnplannedOf(t *testing.T) {
	p, err := NewPlan(delayspec.Spec{Prefix: "p", Targets: delayspec.Targets{{Name: "p.orders", Type: "topic"}}, Plugin: delayspec.PluginOff})
	if err != nil {
		t.Fatal(err)
	}
	exchanges := []string{p.Names.Dispatch(), "p.orders", "p.eu.dispatch", "p.ladder.1ms.r32.shortest-first.l07", "other"}
	queues := map[string]ManagedQueue{
		p.Names.Parking():   {Messages: 0},
		"p.bucket.10000ms":  {Messages: 3},
		"p.ladder.09.01":    {Messages: -1}, // count unknown
		"p.eu.ladder.00.01": {Messages: 5},
		"p.orders.ready":    {Messages: 1},
	}
	got := unplannedOf(p, exchanges, queues)
	want := []Unplanned{
		{Kind: KindExchange, Name: "p.ladder.1ms.r32.shortest-first.l07", Messages: -1},
		{Kind: KindQueue, Name: "p.bucket.10000ms", Messages: 3},
		{Kind: KindQueue, Name: "p.ladder.09.01", Messages: 0},
	}
	if !slices.Equal(got, want) {
		t.Errorf("unplannedOf = %v, want %v", got, want)
	}
}

// TestManagementRequestBounds: a request is bounded by its context's deadline, however far
// (not by a fixed client timeout), and by requestTimeout when the context has none.
func TestManagementRequestBounds(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
			w.Write([]byte("[]"))
		}
	}))
	defer srv.Close()
	defer close(release)
	m, err := NewManagement(srv.URL+"/", "/")
	if err != nil {
		t.Fatal(err)
	}
	old := requestTimeout
	requestTimeout = 50 * time.Millisecond
	defer func() { requestTimeout = old }()

	// A deadline far beyond requestTimeout: the answer, given after 300 ms, is awaited.
	go func() { time.Sleep(300 * time.Millisecond); release <- struct{}{} }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []any
	if err := m.get(ctx, "api/slow", &out); err != nil {
		t.Errorf("with a 1 min deadline: %v, want the answer given after 300 ms", err)
	}
	// No deadline: requestTimeout ends it.
	if err := m.get(context.Background(), "api/slow", &out); !errors.Is(err, ErrManagement) {
		t.Errorf("without a deadline: err = %v, want ErrManagement after requestTimeout", err)
	}
}

// TestNewManagementRefusesQueryAndAPIPath: the API's paths are appended to the URL's, so a
// query or fragment ended up inside every request (and a secret in it in error messages), and
// a URL ending in /api/ asked for /api/api/...: each is refused, naming the fix, never
// printing the query or the password.
func TestNewManagementRefusesQueryAndAPIPath(t *testing.T) {
	for _, raw := range []string{
		"http://u:pw7secret@h:15672/?token=q9secret", "http://u:pw7secret@h:15672/#q9secret", "http://u:pw7secret@h:15672/api/",
		"http://u:pw7secret@h:15672/api", "https://u:pw7secret@h/rabbitmq/api/", "http://u:pw7secret@h:15672/?",
	} {
		_, err := NewManagement(raw, "/")
		if !errors.Is(err, ErrManagement) || !strings.Contains(err.Error(), "without a query, fragment or /api path") {
			t.Errorf("NewManagement(%q) = %v, want ErrManagement naming the fix", raw, err)
			continue
		}
		if strings.Contains(err.Error(), "pw7secret") || strings.Contains(err.Error(), "q9secret") {
			t.Errorf("NewManagement(%q): the error prints a secret: %v", raw, err)
		}
	}
	// The URL shown keeps its host, port and path: the path is what the message is about.
	_, err := NewManagement("http://u:pw7secret@127.0.0.1:24554/api/", "/")
	if err == nil || !strings.Contains(err.Error(), `"http://127.0.0.1:24554/api/"`) {
		t.Errorf("NewManagement with an /api/ path: %v, want the URL shown as http://127.0.0.1:24554/api/", err)
	}
	for _, raw := range []string{"http://u:p@h:15672/", "http://u:p@h:15672", "https://u:p@h/rabbitmq/", "http://h:15672/apis/"} {
		if _, err := NewManagement(raw, "/"); err != nil {
			t.Errorf("NewManagement(%q) = %v, want it accepted", raw, err)
		}
	}
}

// TestManagementErrorAdviceNoUser: a 401 to a management URL without a user says that the URL
// has none, not to check a password that is not there.
func TestManagementErrorAdviceNoUser(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	m, err := NewManagement(srv.URL, "orders")
	if err != nil {
		t.Fatalf("NewManagement: %v", err)
	}
	_, err = m.Queues(context.Background())
	if !errors.Is(err, ErrManagement) || !strings.Contains(err.Error(), "has no user") || strings.Contains(err.Error(), "password of") {
		t.Errorf("401 without a user in the URL: %v, want an error saying the URL has no user", err)
	}
}
