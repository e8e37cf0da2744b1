"""Generated code of the policy API (controller/proto/tng/policy/v1/policy.proto); see tng_controller.protogen."""
