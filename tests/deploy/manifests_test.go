package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	inferencev1alpha2 "sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const manifests = "../../deploy/kubernetes"

// decodeStrict decodes one manifest into the upstream type of its
// apiVersion and kind; a field the type does not have is an error.
func decodeStrict(doc []byte) (any, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return nil, err
	}
	var obj any
	switch head.APIVersion + " " + head.Kind {
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		obj = &autoscalingv2.HorizontalPodAutoscaler{}
	case "inference.networking.k8s.io/v1 InferencePool":
		obj = &inferencev1.InferencePool{}
	case "gateway.networking.k8s.io/v1 HTTPRoute":
		obj = &gatewayv1.HTTPRoute{}
	case "llm-d.ai/v1alpha2 InferenceObjective":
		// The objective moved with the endpoint picker to llm-d's API
		// group; its fields are those of the extension's v1alpha2 type,
		// the last published on the module proxy.
		obj = &inferencev1alpha2.InferenceObjective{}
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		obj = &kustypes.Kustomization{}
	default:
		return nil, fmt.Errorf("%s %s: no upstream type known to this test", head.APIVersion, head.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", head.APIVersion, head.Kind, err)
	}
	return obj, nil
}

// Every YAML file under deploy/kubernetes, patches and kustomizations
// included, decodes strictly into its upstream type.
func TestManifestFilesDecodeStrictly(t *testing.T) {
	n := 0
	err := filepath.WalkDir(manifests, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		if _, err := decodeStrict(b); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		return nil
	})
	if err != nil || n < 12 {
		t.Fatalf("walking %s: %v (%d files)", manifests, err, n)
	}
}

// The decoding is strict: a misspelt field of a real manifest fails.
func TestMisspeltFieldFails(t *testing.T) {
	for file, swap := range map[string][2]string{
		"base/deployment.yaml":                 {"readinessProbe:", "readynessProbe:"},
		"inference-gateway/inferencepool.yaml": {"targetPorts:", "targetPort:"},
		"inference-gateway/httproute.yaml":     {"backendRefs:", "backendRef:"},
		"base/hpa.yaml":                        {"averageValue:", "avgValue:"},
	} {
		b, err := os.ReadFile(filepath.Join(manifests, file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), swap[0]) {
			t.Fatalf("%s has no %q", file, swap[0])
		}
		if _, err := decodeStrict([]byte(strings.Replace(string(b), swap[0], swap[1], 1))); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s with %s: %v, want an unknown field error", file, swap[1], err)
		}
	}
}

// build renders a kustomization as kubectl apply -k would, and decodes
// each resource strictly.
func build(t *testing.T, dir string) []any {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(manifests, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []any
	for _, r := range res.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, err := decodeStrict(b)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		objs = append(objs, obj)
	}
	return objs
}

func find[T any](objs []any) T {
	var zero T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			return v
		}
	}
	return zero
}

// The overlays render and decode strictly, and say what DEPLOY.md says:
// probes on /livez and /readyz with a startup allowance, an init container
// that pulls the model into the cache the server reads offline, flags the
// binary has, a GPU in the CUDA overlay, a pool that selects the pods' port.
func TestOverlays(t *testing.T) {
	help, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("serve --help: %v\n%s", err, help)
	}
	flagName := regexp.MustCompile(`^--([a-z-]+)`)
	for _, overlay := range []string{"overlays/cpu", "overlays/cuda"} {
		objs := build(t, overlay)
		d := find[*appsv1.Deployment](objs)
		if d == nil || find[*corev1.Service](objs) == nil || find[*policyv1.PodDisruptionBudget](objs) == nil ||
			find[*autoscalingv2.HorizontalPodAutoscaler](objs) == nil || find[*corev1.ConfigMap](objs) == nil {
			t.Fatalf("%s: missing resources: %d rendered", overlay, len(objs))
		}
		pod := d.Spec.Template.Spec
		if len(pod.InitContainers) != 1 || !slices.Equal(pod.InitContainers[0].Command, []string{"/usr/local/bin/redrafter", "pull", "$(MODEL)"}) {
			t.Errorf("%s: the init container: %v", overlay, pod.InitContainers)
		}
		c := pod.Containers[0]
		if c.StartupProbe == nil || c.StartupProbe.HTTPGet.Path != "/readyz" || c.StartupProbe.FailureThreshold*c.StartupProbe.PeriodSeconds < 300 ||
			c.LivenessProbe.HTTPGet.Path != "/livez" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: probes %v %v %v", overlay, c.StartupProbe, c.LivenessProbe, c.ReadinessProbe)
		}
		for _, arg := range c.Args {
			m := flagName.FindStringSubmatch(arg)
			if m == nil || !strings.Contains(string(help), "--"+m[1]+" ") {
				t.Errorf("%s: serve has no flag %q", overlay, arg)
			}
		}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if env["HF_HUB_OFFLINE"] != "1" || env["HF_HUB_CACHE"] != "/cache/hub" {
			t.Errorf("%s: serve's environment %v", overlay, env)
		}
		gpu, hasGPU := c.Resources.Limits["nvidia.com/gpu"]
		if wantGPU := overlay == "overlays/cuda"; hasGPU != wantGPU || (hasGPU && gpu.Value() != 1) || wantGPU != slices.Contains(c.Args, "--backend=cuda") {
			t.Errorf("%s: GPU limit %v, args %v", overlay, c.Resources.Limits, c.Args)
		}
		if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 65 {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want more than the drain delay and shutdown timeout", overlay, pod.TerminationGracePeriodSeconds)
		}
		if got := d.Spec.Template.Labels["app.kubernetes.io/name"]; got != "redrafter" {
			t.Errorf("%s: pod label %q", overlay, got)
		}
	}
	objs := build(t, "inference-gateway")
	pool := find[*inferencev1.InferencePool](objs)
	route := find[*gatewayv1.HTTPRoute](objs)
	if pool == nil || route == nil || find[*inferencev1alpha2.InferenceObjective](objs) == nil {
		t.Fatalf("inference-gateway: %d rendered", len(objs))
	}
	if pool.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "redrafter" || len(pool.Spec.TargetPorts) != 1 || pool.Spec.TargetPorts[0].Number != 8080 {
		t.Errorf("the pool does not select the pods' port: %+v", pool.Spec)
	}
	if ref := route.Spec.Rules[0].BackendRefs[0]; ref.Kind == nil || *ref.Kind != "InferencePool" || string(ref.Name) != pool.Name {
		t.Errorf("the route's backend: %+v", ref)
	}
}
