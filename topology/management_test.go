package topology

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
