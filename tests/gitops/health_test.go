// Flux's two readings of a DistributedTrainingJob's health, over the captured states of tests/data/gitops
// (what the operator's core writes, tests/support/gitops_states.py), checked against the table in
// docs/gitops.md: kstatus (what a Kustomization with `wait: true` waits for) and the CEL
// `healthCheckExprs` that docs/gitops.md gives, read from the docs themselves so that the two cannot
// drift. Run by tests/unit/test_flux_health.py.
package gitops

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

const (
	docs = "../../docs/gitops.md"
	// The table's columns this test checks (the others are Argo CD's and kubectl's).
	stateColumn   = "captured state"
	kstatusColumn = "Flux kstatus"
	celColumn     = "Flux `healthCheckExprs`"
)

// row is one captured state of the table: its file and what each column says of it.
type row struct {
	state, file string
	cells       map[string]string
}

var link = regexp.MustCompile(`\]\(([^)]+)\)`)

// table reads the health table of docs/gitops.md: the one whose first column is stateColumn, each
// state's cell a link to its captured file.
func table(t *testing.T, text string) []row {
	t.Helper()
	var header []string
	var rows []row
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "|") {
			if header != nil {
				break // the table ended
			}
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case header == nil && cells[0] == stateColumn:
			header = cells
		case header == nil || strings.HasPrefix(cells[0], "---"):
		default:
			found := link.FindStringSubmatch(cells[0])
			if found == nil {
				t.Fatalf("docs/gitops.md: the state %q links to no captured file", cells[0])
			}
			file := filepath.Join(filepath.Dir(docs), found[1])
			r := row{state: strings.TrimSuffix(filepath.Base(file), ".yaml"), file: file, cells: map[string]string{}}
			for i, name := range header {
				r.cells[name] = strings.Trim(cells[i], "`")
			}
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		t.Fatalf("docs/gitops.md has no table whose first column is %q", stateColumn)
	}
	return rows
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// captured reads a captured job as Flux reads it from the apiserver: JSON numbers as int64.
func captured(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(read(t, path)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return u
}

func TestKstatusSaysWhatTheDocsTableSays(t *testing.T) {
	for _, r := range table(t, read(t, docs)) {
		result, err := status.Compute(captured(t, r.file))
		if err != nil {
			t.Fatalf("%s: %v", r.file, err)
		}
		t.Logf("%-14s kstatus %-10s %s", r.state, result.Status, result.Message)
		if want := r.cells[kstatusColumn]; string(result.Status) != want {
			t.Errorf("%s: kstatus says %s (%s); docs/gitops.md's table says %s",
				r.state, result.Status, result.Message, want)
		}
	}
}

// healthCheck is one entry of a Kustomization's spec.healthCheckExprs.
type healthCheck struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Current    string `json:"current"`
	Failed     string `json:"failed"`
	InProgress string `json:"inProgress"`
}

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(healthCheckExprs:\n.*?)```")

// documentedChecks reads the healthCheckExprs of DistributedTrainingJob from the docs' YAML block.
func documentedChecks(t *testing.T) healthCheck {
	t.Helper()
	block := yamlBlock.FindStringSubmatch(read(t, docs))
	if block == nil {
		t.Fatal("docs/gitops.md has no ```yaml block starting with healthCheckExprs:")
	}
	var spec struct {
		HealthCheckExprs []healthCheck `json:"healthCheckExprs"`
	}
	if err := yaml.UnmarshalStrict([]byte(block[1]), &spec); err != nil {
		t.Fatalf("docs/gitops.md's healthCheckExprs: %v", err)
	}
	for _, check := range spec.HealthCheckExprs {
		if check.Kind == "DistributedTrainingJob" {
			return check
		}
	}
	t.Fatal("docs/gitops.md's healthCheckExprs has none for kind DistributedTrainingJob")
	return healthCheck{}
}

// program parses an expression as Flux does (fluxcd/pkg runtime/cel/expression.go, NewExpression at
// commit e2cfd1a2d1815a81b3e77ef750e6528282ccccd6, 2026-07-22: the same environment options; parsed,
// not compiled, since the object's fields are not declared).
func program(t *testing.T, expr string) cel.Program {
	t.Helper()
	env, err := cel.NewEnv(cel.HomogeneousAggregateLiterals(), cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true), cel.CrossTypeNumericComparisons(true), cel.OptionalTypes(),
		ext.Strings(), ext.Sets(), ext.Encoders())
	if err != nil {
		t.Fatal(err)
	}
	parsed, issues := env.Parse(expr)
	if issues != nil && issues.Err() != nil {
		t.Fatalf("%q: %v", expr, issues.Err())
	}
	prog, err := env.Program(parsed, cel.EvalOptions(cel.OptOptimize), cel.InterruptCheckFrequency(100))
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// fluxStatus is Flux's verdict (fluxcd/pkg runtime/cel/status_evaluator.go, StatusEvaluator.Evaluate at
// the same commit, RFC 0009's order): InProgress while status.observedGeneration differs from
// metadata.generation; then the first of inProgress, failed, current that is true; else InProgress. An
// expression that fails to evaluate is Unknown, with the error (cli-utils' generic status reader, which
// Flux's CEL status reader hands its verdict to: polling/statusreaders/common.go,
// errResourceToResourceStatus).
func fluxStatus(t *testing.T, check healthCheck, u *unstructured.Unstructured) (status.Status, error) {
	t.Helper()
	obj := u.UnstructuredContent()
	observed, found, err := unstructured.NestedInt64(obj, "status", "observedGeneration")
	if err == nil && found && observed != u.GetGeneration() {
		return status.InProgressStatus, nil
	}
	for _, e := range []struct {
		expr   string
		status status.Status
	}{{check.InProgress, status.InProgressStatus}, {check.Failed, status.FailedStatus}, {check.Current, status.CurrentStatus}} {
		if e.expr == "" {
			continue
		}
		val, _, err := program(t, e.expr).ContextEval(context.Background(), obj)
		if err != nil {
			return status.UnknownStatus, fmt.Errorf("%q: %w", e.expr, err)
		}
		result, ok := val.(types.Bool)
		if !ok {
			t.Fatalf("%q gives %v, not a bool", e.expr, val)
		}
		if result {
			return e.status, nil
		}
	}
	return status.InProgressStatus, nil
}

func TestHealthCheckExprsSayWhatTheDocsTableSays(t *testing.T) {
	check := documentedChecks(t)
	if check.Current == "" {
		t.Fatal("docs/gitops.md's healthCheckExprs has no current expression (Flux requires one)")
	}
	for _, r := range table(t, read(t, docs)) {
		got, err := fluxStatus(t, check, captured(t, r.file))
		t.Logf("%-14s healthCheckExprs %-10s %v", r.state, got, err)
		if want := r.cells[celColumn]; string(got) != want {
			t.Errorf("%s: the healthCheckExprs of docs/gitops.md say %s; its table says %s", r.state, got, want)
		}
	}
}

func TestMain(m *testing.M) {
	if _, err := os.Stat(docs); err != nil {
		fmt.Fprintln(os.Stderr, "run from tests/gitops:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}
